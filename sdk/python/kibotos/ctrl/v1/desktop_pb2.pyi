from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DESKTOP_BUTTON_ACTION_CLICK: DesktopButtonAction
DESKTOP_BUTTON_ACTION_PRESS: DesktopButtonAction
DESKTOP_BUTTON_ACTION_RELEASE: DesktopButtonAction
DESKTOP_BUTTON_ACTION_UNSPECIFIED: DesktopButtonAction
DESKTOP_IMAGE_FORMAT_JPEG: DesktopImageFormat
DESKTOP_IMAGE_FORMAT_PNG: DesktopImageFormat
DESKTOP_IMAGE_FORMAT_UNSPECIFIED: DesktopImageFormat
DESKTOP_KEY_ACTION_PRESS: DesktopKeyAction
DESKTOP_KEY_ACTION_RELEASE: DesktopKeyAction
DESKTOP_KEY_ACTION_TAP: DesktopKeyAction
DESKTOP_KEY_ACTION_UNSPECIFIED: DesktopKeyAction
DESKTOP_POINTER_BUTTON_KIND_BACK: DesktopPointerButtonKind
DESKTOP_POINTER_BUTTON_KIND_FORWARD: DesktopPointerButtonKind
DESKTOP_POINTER_BUTTON_KIND_LEFT: DesktopPointerButtonKind
DESKTOP_POINTER_BUTTON_KIND_MIDDLE: DesktopPointerButtonKind
DESKTOP_POINTER_BUTTON_KIND_RIGHT: DesktopPointerButtonKind
DESKTOP_POINTER_BUTTON_KIND_UNSPECIFIED: DesktopPointerButtonKind

class CaptureScreenRequest(_message.Message):
    __slots__ = ["image", "workspace_id"]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    image: DesktopImageOptions
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., image: _Optional[_Union[DesktopImageOptions, _Mapping]] = ...) -> None: ...

class CaptureScreenResponse(_message.Message):
    __slots__ = ["frame"]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    frame: DesktopFrame
    def __init__(self, frame: _Optional[_Union[DesktopFrame, _Mapping]] = ...) -> None: ...

class DeliverInputRequest(_message.Message):
    __slots__ = ["events", "workspace_id"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[DesktopInputEvent]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[DesktopInputEvent, _Mapping]]] = ...) -> None: ...

class DeliverInputResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class DesktopFrame(_message.Message):
    __slots__ = ["captured_at", "format", "height", "image", "pointer_x", "pointer_y", "screen_height", "screen_width", "width"]
    CAPTURED_AT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    POINTER_X_FIELD_NUMBER: _ClassVar[int]
    POINTER_Y_FIELD_NUMBER: _ClassVar[int]
    SCREEN_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    SCREEN_WIDTH_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    captured_at: _timestamp_pb2.Timestamp
    format: DesktopImageFormat
    height: int
    image: bytes
    pointer_x: int
    pointer_y: int
    screen_height: int
    screen_width: int
    width: int
    def __init__(self, format: _Optional[_Union[DesktopImageFormat, str]] = ..., image: _Optional[bytes] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., screen_width: _Optional[int] = ..., screen_height: _Optional[int] = ..., pointer_x: _Optional[int] = ..., pointer_y: _Optional[int] = ..., captured_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DesktopImageOptions(_message.Message):
    __slots__ = ["format", "jpeg_quality", "max_height", "max_width"]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    JPEG_QUALITY_FIELD_NUMBER: _ClassVar[int]
    MAX_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_WIDTH_FIELD_NUMBER: _ClassVar[int]
    format: DesktopImageFormat
    jpeg_quality: int
    max_height: int
    max_width: int
    def __init__(self, format: _Optional[_Union[DesktopImageFormat, str]] = ..., jpeg_quality: _Optional[int] = ..., max_width: _Optional[int] = ..., max_height: _Optional[int] = ...) -> None: ...

class DesktopInputEvent(_message.Message):
    __slots__ = ["button", "key", "move", "pause", "scroll", "text"]
    BUTTON_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MOVE_FIELD_NUMBER: _ClassVar[int]
    PAUSE_FIELD_NUMBER: _ClassVar[int]
    SCROLL_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    button: DesktopPointerButton
    key: DesktopKeyInput
    move: DesktopPointerMove
    pause: _duration_pb2.Duration
    scroll: DesktopScroll
    text: DesktopTextInput
    def __init__(self, key: _Optional[_Union[DesktopKeyInput, _Mapping]] = ..., text: _Optional[_Union[DesktopTextInput, _Mapping]] = ..., move: _Optional[_Union[DesktopPointerMove, _Mapping]] = ..., button: _Optional[_Union[DesktopPointerButton, _Mapping]] = ..., scroll: _Optional[_Union[DesktopScroll, _Mapping]] = ..., pause: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class DesktopKeyInput(_message.Message):
    __slots__ = ["action", "keys"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    action: DesktopKeyAction
    keys: str
    def __init__(self, keys: _Optional[str] = ..., action: _Optional[_Union[DesktopKeyAction, str]] = ...) -> None: ...

class DesktopPointerButton(_message.Message):
    __slots__ = ["action", "button", "click_count"]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    BUTTON_FIELD_NUMBER: _ClassVar[int]
    CLICK_COUNT_FIELD_NUMBER: _ClassVar[int]
    action: DesktopButtonAction
    button: DesktopPointerButtonKind
    click_count: int
    def __init__(self, button: _Optional[_Union[DesktopPointerButtonKind, str]] = ..., action: _Optional[_Union[DesktopButtonAction, str]] = ..., click_count: _Optional[int] = ...) -> None: ...

class DesktopPointerMove(_message.Message):
    __slots__ = ["x", "y"]
    X_FIELD_NUMBER: _ClassVar[int]
    Y_FIELD_NUMBER: _ClassVar[int]
    x: int
    y: int
    def __init__(self, x: _Optional[int] = ..., y: _Optional[int] = ...) -> None: ...

class DesktopScroll(_message.Message):
    __slots__ = ["delta_x", "delta_y"]
    DELTA_X_FIELD_NUMBER: _ClassVar[int]
    DELTA_Y_FIELD_NUMBER: _ClassVar[int]
    delta_x: int
    delta_y: int
    def __init__(self, delta_x: _Optional[int] = ..., delta_y: _Optional[int] = ...) -> None: ...

class DesktopTextInput(_message.Message):
    __slots__ = ["text"]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class StreamScreenRequest(_message.Message):
    __slots__ = ["image", "max_fps", "workspace_id"]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    MAX_FPS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    image: DesktopImageOptions
    max_fps: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., image: _Optional[_Union[DesktopImageOptions, _Mapping]] = ..., max_fps: _Optional[int] = ...) -> None: ...

class StreamScreenResponse(_message.Message):
    __slots__ = ["frame"]
    FRAME_FIELD_NUMBER: _ClassVar[int]
    frame: DesktopFrame
    def __init__(self, frame: _Optional[_Union[DesktopFrame, _Mapping]] = ...) -> None: ...

class DesktopImageFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DesktopKeyAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DesktopPointerButtonKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DesktopButtonAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
