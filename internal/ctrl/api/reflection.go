package api

import (
	"fmt"
	"slices"

	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// newReflector describes only the services an endpoint mounts. The
// default reflector resolves any symbol linked into ctrl, so the Native
// Workspace endpoint described the operator, node and guest services.
// It serves the files of the mounted services and the files they import,
// each stripped of the services not mounted here: the operator endpoint
// needs workspace.proto's messages, never WorkspaceService.
func newReflector(services []string) *grpcreflect.Reflector {
	files, err := reflectionFiles(services)
	if err != nil {
		// Every mounted service is generated code linked into ctrl:
		// failing here is a build defect, not an input.
		panic(fmt.Sprintf("reflection: %v", err))
	}
	return grpcreflect.NewReflector(grpcreflect.NamerFunc(func() []string { return services }),
		grpcreflect.WithDescriptorResolver(files),
		// Kibotos' files define no extensions; the global ones are
		// other packages'.
		grpcreflect.WithExtensionResolver(new(protoregistry.Types)))
}

// reflectionFiles is a registry of the files of services and their
// imports, without the services not among services.
func reflectionFiles(services []string) (*protoregistry.Files, error) {
	files := new(protoregistry.Files)
	var add func(fd protoreflect.FileDescriptor) error
	add = func(fd protoreflect.FileDescriptor) error {
		if _, err := files.FindFileByPath(fd.Path()); err == nil {
			return nil
		}
		for i := range fd.Imports().Len() {
			if err := add(fd.Imports().Get(i).FileDescriptor); err != nil {
				return err
			}
		}
		fdp := protodesc.ToFileDescriptorProto(fd)
		fdp.Service = slices.DeleteFunc(fdp.Service, func(s *descriptorpb.ServiceDescriptorProto) bool {
			return !slices.Contains(services, string(fd.Package().Append(protoreflect.Name(s.GetName()))))
		})
		stripped, err := protodesc.NewFile(fdp, files)
		if err != nil {
			return fmt.Errorf("%s: %w", fd.Path(), err)
		}
		return files.RegisterFile(stripped)
	}
	for _, name := range services {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", name, err)
		}
		if err := add(d.ParentFile()); err != nil {
			return nil, err
		}
	}
	return files, nil
}
