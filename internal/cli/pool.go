package cli

import (
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

var poolHeader = []string{"POOL", "CAPACITY", "RESERVED", "VOLUMES", "LAYERS", "CLEANUPS", "MEMBERS", "VERSION", "LOST"}

func poolRow(p *operatorv1.StoragePool) []string {
	capacity := "unset"
	if p.CapacityBytes != nil {
		capacity = showSize(p.GetCapacityBytes())
	}
	var members []string
	for _, a := range p.GetAttachments() {
		members = append(members, a.GetNodeId())
	}
	return []string{
		p.GetStoragePool(), capacity,
		showSize(p.GetReservedBytes()),
		strconv.FormatUint(p.GetVolumeCount(), 10),
		strconv.FormatUint(p.GetRetainedLayerCount(), 10),
		strconv.FormatUint(p.GetCleanupCount(), 10),
		strings.Join(members, ","),
		strconv.FormatUint(p.GetVersion(), 10),
		strconv.FormatBool(p.GetLostAt() != nil),
	}
}

// objectHeader's first column is the id the move commands take, so -q
// lists what move-volume (a Volume's id) or move-layer (the Workspace's
// id, for its writable layer) would move.
var objectHeader = []string{"OBJECT", "KIND", "WORKSPACE", "POOL", "CAPACITY", "HOLDER", "MOVING_TO"}

func objectRow(o *operatorv1.StoragePoolObject) []string {
	id := o.GetVolumeId()
	if o.GetKind() == operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER {
		id = o.GetWorkspaceId()
	}
	return []string{
		id, trimEnum(o.GetKind().String(), "STORAGE_POOL_OBJECT_KIND_"), o.GetWorkspaceId(), o.GetStoragePool(),
		showSize(o.GetCapacityBytes()), o.GetHolderNodeId(), o.GetMovingTo(),
	}
}

var lostHeader = []string{"POOL", "LOST_VOLUMES", "LOST_LAYERS", "DISCARDED_CLEANUPS"}

func newPoolNoun(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "pool", Short: "Inspect storage pools, set their capacity, move objects between them, declare one lost (operator)"}
	list := &cobra.Command{
		Use: "list", Short: "List storage pools", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*operatorv1.ListStoragePoolsResponse).GetPools, func(token string) (*connect.Response[operatorv1.ListStoragePoolsResponse], error) {
				return client.ListStoragePools(cmd.Context(), connect.NewRequest(&operatorv1.ListStoragePoolsRequest{PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListStoragePoolsResponse{Pools: all}, poolHeader, rowsOf(all, poolRow))
		},
	}
	get := &cobra.Command{
		Use: "get POOL", Short: "Show one storage pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			res, err := client.GetStoragePool(cmd.Context(), connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: args[0]}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, poolHeader, [][]string{poolRow(res.Msg.GetPool())})
		},
	}
	c.AddCommand(list, get, newPoolSetCapacityCommand(out), newPoolDeclareLostCommand(out), newPoolObjectsCommand(out),
		newPoolMoveVolumeCommand(out), newPoolMoveLayerCommand(out))
	return c
}

func newPoolSetCapacityCommand(out *outputFlag) *cobra.Command {
	var commandID string
	var expected uint64
	c := &cobra.Command{
		Use:   "set-capacity POOL SIZE",
		Short: "Set the capacity (2T, 500GiB; a bare number is MiB) new Volumes and writable layers are admitted against in a pool",
		Long: `set-capacity replaces a pool's capacity. Lowering it below what is reserved
stops new objects there and evicts nothing. It sends the pool version it read
(GetStoragePool) unless --expected-version names one.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			capacity, err := parseSize(args[1])
			if err != nil {
				return err
			}
			if capacity == 0 {
				return fmt.Errorf("capacity %q: want a size greater than zero", args[1])
			}
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			if expected == 0 {
				got, err := client.GetStoragePool(cmd.Context(), connect.NewRequest(&operatorv1.GetStoragePoolRequest{StoragePool: args[0]}))
				if err != nil {
					return err
				}
				expected = got.Msg.GetPool().GetVersion()
			}
			res, err := client.SetStoragePoolCapacity(cmd.Context(), connect.NewRequest(&operatorv1.SetStoragePoolCapacityRequest{
				Command: newCommandMetadata(commandID), StoragePool: args[0], ExpectedVersion: expected, CapacityBytes: capacity,
			}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, poolHeader, [][]string{poolRow(res.Msg.GetPool())})
		},
	}
	c.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	c.Flags().Uint64Var(&expected, "expected-version", 0, "the pool version the change applies to (default: the one read now)")
	return c
}

func newPoolDeclareLostCommand(out *outputFlag) *cobra.Command {
	var commandID string
	c := &cobra.Command{
		Use:   "declare-lost POOL",
		Short: "Declare a pool's storage gone for good: its Volumes become LOST",
		Long: `declare-lost records that a pool's storage is gone and will not come back.
ctrl cannot verify it: the operator carries the consequence. Every member of
the pool must be isolated (kibotos node isolate) or retired first. Its Volumes
become LOST, Workspaces whose writable layer was there start with a new one,
and the pool id is never used again.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			res, err := client.DeclareStoragePoolLost(cmd.Context(), connect.NewRequest(&operatorv1.DeclareStoragePoolLostRequest{
				Command: newCommandMetadata(commandID), StoragePool: args[0],
			}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, lostHeader, [][]string{{
				res.Msg.GetPool().GetStoragePool(), strconv.FormatUint(res.Msg.GetLostVolumes(), 10),
				strconv.FormatUint(res.Msg.GetLostRetainedLayers(), 10), strconv.FormatUint(res.Msg.GetDiscardedCleanups(), 10),
			}})
		},
	}
	c.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return c
}

func newPoolObjectsCommand(out *outputFlag) *cobra.Command {
	var kind, volumeID, workspaceID string
	c := &cobra.Command{
		Use:   "objects [POOL]",
		Short: "List the Volumes and writable layers living in a pool, or show where one lives",
		Long: `objects POOL lists the Volumes, then the writable layers, living in POOL
(--kind volume or layer narrows it). objects --volume VOLUME_ID or
--workspace WORKSPACE_ID shows where one Volume or one Workspace's writable
layer lives.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := nodeRegistrationClient()
			if err != nil {
				return err
			}
			if volumeID != "" || workspaceID != "" {
				req := &operatorv1.GetStoragePoolObjectRequest{}
				switch {
				case len(args) > 0 || (volumeID != "" && workspaceID != ""):
					return fmt.Errorf("name one object: --volume or --workspace, without a pool")
				case volumeID != "":
					req.Object = &operatorv1.GetStoragePoolObjectRequest_VolumeId{VolumeId: volumeID}
				default:
					req.Object = &operatorv1.GetStoragePoolObjectRequest_WorkspaceId{WorkspaceId: workspaceID}
				}
				res, err := client.GetStoragePoolObject(cmd.Context(), connect.NewRequest(req))
				if err != nil {
					return err
				}
				return out.print(cmd.OutOrStdout(), res.Msg, objectHeader, [][]string{objectRow(res.Msg.GetObject())})
			}
			if len(args) == 0 {
				return fmt.Errorf("name a pool, or one object with --volume or --workspace")
			}
			kinds := map[string]operatorv1.StoragePoolObjectKind{
				"":       operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_UNSPECIFIED,
				"volume": operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_VOLUME,
				"layer":  operatorv1.StoragePoolObjectKind_STORAGE_POOL_OBJECT_KIND_WRITABLE_LAYER,
			}
			k, ok := kinds[kind]
			if !ok {
				return fmt.Errorf("--kind %q: want volume or layer", kind)
			}
			all, err := everyPage((*operatorv1.ListStoragePoolObjectsResponse).GetObjects, func(token string) (*connect.Response[operatorv1.ListStoragePoolObjectsResponse], error) {
				return client.ListStoragePoolObjects(cmd.Context(), connect.NewRequest(&operatorv1.ListStoragePoolObjectsRequest{StoragePool: args[0], Kind: k, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListStoragePoolObjectsResponse{Objects: all}, objectHeader, rowsOf(all, objectRow))
		},
	}
	c.Flags().StringVar(&kind, "kind", "", "only volume or layer objects")
	c.Flags().StringVar(&volumeID, "volume", "", "show where this Volume lives")
	c.Flags().StringVar(&workspaceID, "workspace", "", "show where this Workspace's writable layer lives")
	return c
}
