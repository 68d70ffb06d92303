package cli

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

func volumeClient() (ctrlv1connect.VolumeServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewVolumeServiceClient)
}

var volumeHeader = []string{"VOLUME", "STATE", "CAPACITY", "POOL", "WORKSPACE"}

func volumeRow(v *ctrlv1.Volume) []string {
	return []string{
		v.GetVolumeId(),
		trimEnum(v.GetState().String(), "VOLUME_STATE_"),
		showSize(v.GetSpec().GetCapacityBytes()),
		v.GetSpec().GetStoragePool(),
		v.GetBoundWorkspaceId(),
	}
}

// showVolume prints a response that carries one Volume.
func showVolume[T any, PT interface {
	*T
	proto.Message
	GetVolume() *ctrlv1.Volume
}](cmd *cobra.Command, out *outputFlag, res *connect.Response[T], err error) error {
	if err != nil {
		return err
	}
	var msg PT = res.Msg
	return out.print(cmd.OutOrStdout(), msg, volumeHeader, [][]string{volumeRow(msg.GetVolume())})
}

func newVolumeCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "volume", Aliases: []string{"vol"}, Short: "Create, inspect, grow and delete Volumes"}
	var commandID string
	var noWait bool

	list := &cobra.Command{
		Use: "list", Short: "List Volumes", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			selector, _ := cmd.Flags().GetString("selector")
			client, err := volumeClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*ctrlv1.ListVolumesResponse).GetVolumes, func(token string) (*connect.Response[ctrlv1.ListVolumesResponse], error) {
				return client.ListVolumes(cmd.Context(), connect.NewRequest(&ctrlv1.ListVolumesRequest{LabelSelector: selector, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &ctrlv1.ListVolumesResponse{Volumes: all}, volumeHeader, rowsOf(all, volumeRow))
		},
	}
	list.Flags().StringP("selector", "l", "", "label selector")

	get := &cobra.Command{
		Use: "get VOLUME_ID", Short: "Show one Volume", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := volumeClient()
			if err != nil {
				return err
			}
			res, err := client.GetVolume(cmd.Context(), connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: args[0]}))
			return showVolume(cmd, out, res, err)
		},
	}

	var capacity sizeFlag
	var pool string
	var labels, annotations map[string]string
	create := &cobra.Command{
		Use: "create", Short: "Create a Volume and wait until a node has made it (AVAILABLE)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := volumeClient()
			if err != nil {
				return err
			}
			res, err := client.CreateVolume(cmd.Context(), connect.NewRequest(&ctrlv1.CreateVolumeRequest{
				Command: newCommandMetadata(commandID),
				Spec:    &ctrlv1.VolumeSpec{CapacityBytes: uint64(capacity), StoragePool: pool},
				Labels:  labels, Annotations: annotations,
			}))
			if err != nil || noWait {
				return showVolume(cmd, out, res, err)
			}
			got, err := waitVolume(cmd.Context(), client, res.Msg.GetVolume().GetVolumeId(), ctrlv1.VolumeState_VOLUME_STATE_CREATING)
			return showVolume(cmd, out, got, err)
		},
	}
	create.Flags().BoolVar(&noWait, "no-wait", false, "return once admitted (CREATING) instead of once a node made the Volume")
	create.Flags().Var(&capacity, "capacity", "capacity (1G, 512Mi; a bare number is MiB; default: the storage profile's); --size is the same flag")
	create.Flags().SetNormalizeFunc(sizeIsCapacity)
	create.Flags().StringToStringVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	create.Flags().StringToStringVar(&annotations, "annotation", nil, "annotation KEY=VALUE (repeatable)")
	create.Flags().StringVar(&pool, "pool", "", "storage pool (default: the deployment's default pool)")
	create.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")

	del := &cobra.Command{
		Use: "delete VOLUME_ID", Short: "Delete a Volume", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := volumeClient()
			if err != nil {
				return err
			}
			res, err := client.DeleteVolume(cmd.Context(), connect.NewRequest(&ctrlv1.DeleteVolumeRequest{Command: newCommandMetadata(commandID), VolumeId: args[0]}))
			return showVolume(cmd, out, res, err)
		},
	}
	del.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")

	resize := &cobra.Command{
		Use: "resize VOLUME_ID SIZE", Short: "Grow a Volume to SIZE (1G, 4GiB; a bare number is MiB); it only grows", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			size, err := parseSize(args[1])
			if err != nil {
				return err
			}
			client, err := volumeClient()
			if err != nil {
				return err
			}
			res, err := client.ResizeVolume(cmd.Context(), connect.NewRequest(&ctrlv1.ResizeVolumeRequest{Command: newCommandMetadata(commandID), VolumeId: args[0], CapacityBytes: size}))
			if err != nil || noWait {
				return showVolume(cmd, out, res, err)
			}
			got, err := waitVolume(cmd.Context(), client, args[0], ctrlv1.VolumeState_VOLUME_STATE_RESIZING)
			return showVolume(cmd, out, got, err)
		},
	}
	resize.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	resize.Flags().BoolVar(&noWait, "no-wait", false, "return once admitted (RESIZING) instead of once the Volume has grown")

	c.AddCommand(list, get, create, resize, newVolumeUpdateCommand(out), del, newVolumeExportCommand(out))
	return c
}

// waitVolume reads a Volume until it has left state (a command's
// transient state, such as RESIZING).
func waitVolume(ctx context.Context, client ctrlv1connect.VolumeServiceClient, id string, state ctrlv1.VolumeState) (*connect.Response[ctrlv1.GetVolumeResponse], error) {
	for {
		got, err := client.GetVolume(ctx, connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: id}))
		if err != nil || got.Msg.GetVolume().GetState() != state {
			return got, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// newVolumeUpdateCommand is `kibotos volume update`: labels and
// annotations, KEY=VALUE or KEY-, each with the revision read just before.
func newVolumeUpdateCommand(out *outputFlag) *cobra.Command {
	var labels, annotations []string
	var commandID string
	c := &cobra.Command{
		Use:   "update VOLUME_ID",
		Short: "Change a Volume's labels or annotations (KEY=VALUE sets one, KEY- removes it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			setLabels, err := mapEdits("--label", labels)
			if err != nil {
				return err
			}
			setAnnotations, err := mapEdits("--annotation", annotations)
			if err != nil {
				return err
			}
			if setLabels == nil && setAnnotations == nil {
				return errors.New("nothing to change: give --label or --annotation")
			}
			client, err := volumeClient()
			if err != nil {
				return err
			}
			got, err := client.GetVolume(cmd.Context(), connect.NewRequest(&ctrlv1.GetVolumeRequest{VolumeId: args[0]}))
			if err != nil {
				return err
			}
			v := got.Msg.GetVolume()
			if setLabels != nil {
				res, err := client.UpdateVolumeLabels(cmd.Context(), connect.NewRequest(&ctrlv1.UpdateVolumeLabelsRequest{
					Command: newCommandMetadata(commandID), VolumeId: v.GetVolumeId(), ExpectedLabelsRevision: v.GetLabelsRevision(), Labels: setLabels(v.GetLabels()),
				}))
				if err != nil {
					return err
				}
				v = res.Msg.GetVolume()
			}
			if setAnnotations != nil {
				res, err := client.UpdateVolumeAnnotations(cmd.Context(), connect.NewRequest(&ctrlv1.UpdateVolumeAnnotationsRequest{
					Command: newCommandMetadata(commandIDFor(commandID, 1)), VolumeId: v.GetVolumeId(), ExpectedAnnotationsRevision: v.GetAnnotationsRevision(), Annotations: setAnnotations(v.GetAnnotations()),
				}))
				if err != nil {
					return err
				}
				v = res.Msg.GetVolume()
			}
			return out.print(cmd.OutOrStdout(), v, volumeHeader, [][]string{volumeRow(v)})
		},
	}
	c.Flags().StringArrayVar(&labels, "label", nil, "KEY=VALUE sets a label, KEY- removes it (repeatable)")
	c.Flags().StringArrayVar(&annotations, "annotation", nil, "KEY=VALUE sets an annotation, KEY- removes it (repeatable)")
	c.Flags().StringVar(&commandID, "command-id", "", "command_id of the first change (the second gets it with -2)")
	return c
}

// sizeIsCapacity reads volume create's --size as --capacity: the SDKs
// call it size (k.volumes.create("1Gi"), { size }), the API capacity_bytes.
func sizeIsCapacity(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if name == "size" {
		name = "capacity"
	}
	return pflag.NormalizedName(name)
}
