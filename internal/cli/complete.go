package cli

import (
	"context"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
)

// Shell completion of ids: cobra's `completion bash|zsh|fish|powershell`
// writes the script, which calls the hidden `__complete` command; the
// functions here answer it with the ids the API lists, through the same
// client configuration as every client command.
const (
	// completeTimeout bounds the API calls of one completion: a shell
	// waits for it at each TAB.
	completeTimeout = 2 * time.Second
	// completeOffered is the most ids one completion offers, and
	// completeScanned the most objects it reads to find them (the API has
	// no filter by id prefix, so it filters the pages it reads).
	completeOffered = 100
	completeScanned = 1000
	completePage    = 500
)

// idPage reads one page of ids (with a description each: the object's
// state) after token, and the token of the next page ("" at the end).
type idPage func(ctx context.Context, token string) ([]idItem, string, error)

type idItem struct{ id, desc string }

// idCompleters are the placeholders of the commands' usage lines and
// flags that name an object, and how to list its ids.
var idCompleters = map[string]idPage{
	"WORKSPACE_ID": workspaceIDs,
	"VOLUME_ID":    volumeIDs,
	"NODE_ID":      nodeIDs,
	"POOL":         poolIDs,
}

// idFlags are the flags of client commands that take such an id.
var idFlags = map[string]string{
	"workspace": "WORKSPACE_ID",
	"volume":    "VOLUME_ID",
	"node":      "NODE_ID",
	"pool":      "POOL",
	"to":        "POOL", // pool move-volume|move-layer --to POOL
}

// registerIDCompletion gives every client command whose usage line names
// WORKSPACE_ID, VOLUME_ID, NODE_ID or POOL as a positional argument a
// completion of that argument, and its id flags (--volume, --node, --pool,
// --to, --workspace) one too. The usage line is the source: what `--help`
// says a position holds is what TAB completes there. The processes (ctrl,
// node's agent, dev, sim) are left alone: their flags (node --pool
// NAME=DIR) are not ids.
func registerIDCompletion(c *cobra.Command) {
	for _, sub := range c.Commands() {
		registerIDCompletion(sub)
	}
	if c.GroupID == "process" {
		return
	}
	if args := positionals(c.Use); c.ValidArgsFunction == nil && hasCompleter(args) {
		c.ValidArgsFunction = func(cmd *cobra.Command, given []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(given) >= len(args) {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return completeIDs(cmd, idCompleters[args[len(given)]], prefix)
		}
	}
	for name, kind := range idFlags {
		if c.LocalNonPersistentFlags().Lookup(name) == nil {
			continue
		}
		list := idCompleters[kind]
		_ = c.RegisterFlagCompletionFunc(name, func(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return completeIDs(cmd, list, prefix)
		})
	}
}

// positionals are the placeholders of a usage line's positional
// arguments, up to its first flag or `--`: "get WORKSPACE_ID PROCESS_ID"
// is [WORKSPACE_ID PROCESS_ID], "objects [POOL]" is [POOL].
func positionals(use string) []string {
	fields := strings.Fields(use)
	var out []string
	for _, f := range fields[min(1, len(fields)):] {
		f = strings.Trim(f, "[]")
		if strings.HasPrefix(f, "-") {
			break
		}
		out = append(out, strings.TrimSuffix(f, "..."))
	}
	return out
}

func hasCompleter(args []string) bool {
	for _, a := range args {
		if idCompleters[a] != nil {
			return true
		}
	}
	return false
}

// completeIDs lists the ids starting with prefix. Any error (no client
// configuration, ctrl unreachable, a key refused, the timeout) offers
// nothing and says nothing: a shell completing shows no error output.
// Never files: no position or flag here takes a local path.
func completeIDs(cmd *cobra.Command, list idPage, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if list == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completeTimeout)
	defer cancel()
	var out []cobra.Completion
	token := ""
	for scanned := 0; scanned < completeScanned && len(out) < completeOffered; {
		items, next, err := list(ctx, token)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		for _, it := range items {
			if !strings.HasPrefix(it.id, prefix) || len(out) == completeOffered {
				continue
			}
			if it.desc == "" {
				out = append(out, it.id)
			} else {
				out = append(out, cobra.CompletionWithDesc(it.id, it.desc))
			}
		}
		scanned += len(items)
		if next == "" || len(items) == 0 {
			break
		}
		token = next
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func workspaceIDs(ctx context.Context, token string) ([]idItem, string, error) {
	client, err := workspaceClient()
	if err != nil {
		return nil, "", err
	}
	res, err := client.ListWorkspaces(ctx, connect.NewRequest(&ctrlv1.ListWorkspacesRequest{PageSize: completePage, PageToken: token}))
	if err != nil {
		return nil, "", err
	}
	return itemsOf(res.Msg.GetWorkspaces(), func(w *ctrlv1.Workspace) idItem {
		return idItem{w.GetWorkspaceId(), trimEnum(w.GetState().String(), "WORKSPACE_STATE_")}
	}), res.Msg.GetNextPageToken(), nil
}

func volumeIDs(ctx context.Context, token string) ([]idItem, string, error) {
	client, err := volumeClient()
	if err != nil {
		return nil, "", err
	}
	res, err := client.ListVolumes(ctx, connect.NewRequest(&ctrlv1.ListVolumesRequest{PageSize: completePage, PageToken: token}))
	if err != nil {
		return nil, "", err
	}
	return itemsOf(res.Msg.GetVolumes(), func(v *ctrlv1.Volume) idItem {
		return idItem{v.GetVolumeId(), trimEnum(v.GetState().String(), "VOLUME_STATE_")}
	}), res.Msg.GetNextPageToken(), nil
}

func nodeIDs(ctx context.Context, token string) ([]idItem, string, error) {
	client, err := nodeRegistrationClient()
	if err != nil {
		return nil, "", err
	}
	res, err := client.ListNodeRegistrations(ctx, connect.NewRequest(&operatorv1.ListNodeRegistrationsRequest{PageSize: completePage, PageToken: token}))
	if err != nil {
		return nil, "", err
	}
	return itemsOf(res.Msg.GetRegistrations(), func(n *operatorv1.NodeRegistration) idItem {
		return idItem{n.GetNodeId(), trimEnum(n.GetStatus().String(), "NODE_REGISTRATION_STATUS_")}
	}), res.Msg.GetNextPageToken(), nil
}

func poolIDs(ctx context.Context, token string) ([]idItem, string, error) {
	client, err := nodeRegistrationClient()
	if err != nil {
		return nil, "", err
	}
	res, err := client.ListStoragePools(ctx, connect.NewRequest(&operatorv1.ListStoragePoolsRequest{PageSize: completePage, PageToken: token}))
	if err != nil {
		return nil, "", err
	}
	return itemsOf(res.Msg.GetPools(), func(p *operatorv1.StoragePool) idItem {
		if p.GetLostAt() != nil {
			return idItem{p.GetStoragePool(), "lost"}
		}
		return idItem{id: p.GetStoragePool()}
	}), res.Msg.GetNextPageToken(), nil
}

func itemsOf[T any](list []T, item func(T) idItem) []idItem {
	out := make([]idItem, len(list))
	for i, x := range list {
		out[i] = item(x)
	}
	return out
}
