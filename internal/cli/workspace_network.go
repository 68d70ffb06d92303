package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

// revisionsHelp is what every network command says of its two revisions:
// the API promises enforcement only through applied_revision.
const revisionsHelp = `REVISION is spec.network_policy.revision, the policy asked for (it starts at
1 and grows by one with each change of content). APPLIED is
network_policy_status.applied_revision, the revision the node confirmed in
force for the running execution: "-" when none is confirmed (the Workspace
is not running, or the last application failed). Judge enforcement by
APPLIED, never by a command having returned: APPLIED below REVISION means a
change was issued and is not confirmed yet. DRAINING is the earliest
revision whose connections still keep their old path (set's --drain-seconds).`

var networkHeader = []string{"WORKSPACE", "MODE", "REVISION", "APPLIED", "ALLOW", "DENY", "EGRESSES", "RESOLVERS", "DRAINING"}

// networkRow is a Workspace's policy, asked for and confirmed. The mode is
// spelt as --network takes it.
func networkRow(w *ctrlv1.Workspace) []string {
	p := w.GetSpec().GetNetworkPolicy()
	status := w.GetNetworkPolicyStatus()
	applied := "-"
	if status != nil {
		applied = strconv.FormatUint(status.GetAppliedRevision(), 10)
	}
	draining := "-"
	if r := status.GetDrainingRevision(); r != 0 {
		draining = strconv.FormatUint(r, 10)
	}
	return []string{
		w.GetWorkspaceId(),
		strings.ReplaceAll(strings.ToLower(trimEnum(p.GetMode().String(), "NETWORK_POLICY_MODE_")), "_", "-"),
		strconv.FormatUint(p.GetRevision(), 10),
		applied,
		or(strings.Join(p.GetAllow(), ","), "-"),
		or(strings.Join(p.GetDeny(), ","), "-"),
		or(egressesText(p.GetEgresses()), "-"),
		or(resolversText(p.GetResolvers()), "-"),
		draining,
	}
}

// egressesText is the policy's egresses as --egress takes them.
func egressesText(es []*ctrlv1.NetworkPolicyEgress) string {
	parts := make([]string, 0, len(es))
	for _, e := range es {
		parts = append(parts, e.GetEgressId()+"="+strings.Join(e.GetDestinations(), ","))
	}
	return strings.Join(parts, " ")
}

func newWorkspaceNetworkCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{
		Use:   "network",
		Short: "Show and replace a Workspace's egress policy, with the revision asked for and the one applied",
		Long:  revisionsHelp,
	}
	c.AddCommand(newNetworkGetCommand(out), newNetworkSetCommand(out))
	return c
}

func newNetworkGetCommand(out *outputFlag) *cobra.Command {
	return &cobra.Command{
		Use:   "get WORKSPACE_ID",
		Short: "Show a Workspace's network policy: its revision and the revision applied",
		Long:  revisionsHelp + "\n\n-o json or yaml prints the GetWorkspaceResponse (the policy is its\nworkspace.spec.networkPolicy, the confirmation workspace.networkPolicyStatus).",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := workspaceClient()
			if err != nil {
				return err
			}
			res, err := client.GetWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: args[0]}))
			if err != nil {
				return err
			}
			return printNetwork(cmd, out, res.Msg)
		},
	}
}

func printNetwork(cmd *cobra.Command, out *outputFlag, msg *ctrlv1.GetWorkspaceResponse) error {
	return out.print(cmd.OutOrStdout(), msg, networkHeader, [][]string{networkRow(msg.GetWorkspace())})
}

// networkSetFlags are a `network set`: the policy, how the change treats
// open connections, and how long to wait for its confirmation.
type networkSetFlags struct {
	network          networkFlags
	drainSeconds     uint32
	expectedRevision uint64
	commandID        string
	noWait           bool
	timeout          time.Duration
}

func newNetworkSetCommand(out *outputFlag) *cobra.Command {
	var f networkSetFlags
	c := &cobra.Command{
		Use:   "set WORKSPACE_ID --network MODE [--allow CIDR]... [--deny CIDR]...",
		Short: "Replace a Workspace's network policy and wait until the node confirms it applied",
		Long: `set replaces the whole policy (flags not given are not kept from the old
one) with the revision it reads just before (or --expected-revision), so a
change made meanwhile by someone else is refused, not overwritten. On a
running (AVAILABLE) Workspace it then waits, showing progress on stderr,
until APPLIED reaches the new revision; it fails when the node could not
apply it (then no policy is confirmed: APPLIED is "-") or after --timeout.
--no-wait returns once the change is admitted. A stopped Workspace gets the
policy at its next start. It prints what get prints.

` + revisionsHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return f.run(cmd, out, args[0]) },
	}
	f.network.register(c, "the egress policy: deny-all or public-internet (with its --allow and --deny); required")
	fl := c.Flags()
	fl.Uint32Var(&f.drainSeconds, "drain-seconds", 0, "how long a connection the change moves keeps its old path (at most 3600)")
	fl.Uint64Var(&f.expectedRevision, "expected-revision", 0, "the REVISION this change replaces (default: the one read just before)")
	fl.StringVar(&f.commandID, "command-id", "", "command_id to send (retrying with the same id is safe); default: a new one")
	fl.BoolVar(&f.noWait, "no-wait", false, "return once the change is admitted instead of waiting for APPLIED")
	fl.DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long to wait for APPLIED to reach the new revision")
	return c
}

func (f *networkSetFlags) run(cmd *cobra.Command, out *outputFlag, id string) error {
	if f.network.mode == "" {
		return errors.New("--network is required: deny-all or public-internet")
	}
	policy, err := f.network.policy()
	if err != nil {
		return err
	}
	client, err := workspaceClient()
	if err != nil {
		return err
	}
	expected, err := f.expected(cmd, client, id)
	if err != nil {
		return err
	}
	meta := newCommandMetadata(f.commandID)
	res, err := client.UpdateWorkspaceNetworkPolicy(cmd.Context(), connect.NewRequest(&ctrlv1.UpdateWorkspaceNetworkPolicyRequest{
		Command: meta, WorkspaceId: id, ExpectedRevision: expected, NetworkPolicy: policy, DrainSeconds: f.drainSeconds,
	}))
	if err != nil {
		return err
	}
	w := res.Msg.GetWorkspace()
	// Only a change of content on a running execution is applied by the
	// node; an equal policy keeps its revision and is not sent again.
	if f.noWait || w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE || w.GetSpec().GetNetworkPolicy().GetRevision() == expected {
		return printNetwork(cmd, out, &ctrlv1.GetWorkspaceResponse{Workspace: w})
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	applied, err := awaitApplied(ctx, client, newProgress(cmd.ErrOrStderr()), id, meta.GetCommandId(), w.GetSpec().GetNetworkPolicy().GetRevision())
	// The wait's own deadline, not the caller's (Ctrl-C), is the timeout.
	if ctx.Err() == context.DeadlineExceeded && cmd.Context().Err() == nil {
		return fmt.Errorf("%s: network policy revision %d not confirmed applied after %s; it may not be enforced (`kibotos workspace network get %s` shows APPLIED)", id, w.GetSpec().GetNetworkPolicy().GetRevision(), f.timeout, id)
	}
	if err != nil {
		return err
	}
	return printNetwork(cmd, out, applied)
}

// expected is the revision the change replaces: --expected-revision, or
// the one the Workspace has now.
func (f *networkSetFlags) expected(cmd *cobra.Command, client ctrlv1connect.WorkspaceServiceClient, id string) (uint64, error) {
	if cmd.Flags().Changed("expected-revision") {
		return f.expectedRevision, nil
	}
	got, err := client.GetWorkspace(cmd.Context(), connect.NewRequest(&ctrlv1.GetWorkspaceRequest{WorkspaceId: id}))
	if err != nil {
		return 0, err
	}
	return got.Msg.GetWorkspace().GetSpec().GetNetworkPolicy().GetRevision(), nil
}

// awaitApplied follows the update command to its end with WaitWorkspace
// (no polling: each wait answers as soon as the command ends, or after
// followStep with its progress) and then the Workspace until its
// applied_revision reaches revision (or it stops running: the next start
// carries the policy). A failed command is an error: the node did not
// apply the policy.
func awaitApplied(ctx context.Context, client ctrlv1connect.WorkspaceServiceClient, p *progress, id, commandID string, revision uint64) (*ctrlv1.GetWorkspaceResponse, error) {
	defer p.end()
	for {
		waited, err := client.WaitWorkspace(ctx, connect.NewRequest(&ctrlv1.WaitWorkspaceRequest{
			WorkspaceId: id, CommandId: commandID, Timeout: durationpb.New(followStep),
		}))
		if err != nil {
			return nil, err
		}
		wc, w := waited.Msg.GetCommand(), waited.Msg.GetWorkspace()
		switch wc.GetState() {
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_FAILED:
			return nil, notApplied(id, revision, wc.GetFailure())
		case ctrlv1.WorkspaceCommandState_WORKSPACE_COMMAND_STATE_SUCCEEDED:
			if done, err := appliedOrStopped(ctx, client, p, id, revision, w); done || err != nil {
				return &ctrlv1.GetWorkspaceResponse{Workspace: w}, err
			}
		}
		what := fmt.Sprintf("applying network policy revision %d", revision)
		if wc.GetProgress() != "" {
			what += " (" + wc.GetProgress() + ")"
		}
		p.stage(what)
	}
}

// appliedOrStopped tells, once the update command has succeeded, whether
// w shows the revision in force or no longer runs. Neither is a confirmed
// application still to be recorded: the command has ended, so a wait on
// it would answer at once; it waits followStep before the next look.
func appliedOrStopped(ctx context.Context, client ctrlv1connect.WorkspaceServiceClient, p *progress, id string, revision uint64, w *ctrlv1.Workspace) (bool, error) {
	switch {
	case w.GetNetworkPolicyStatus().GetAppliedRevision() >= revision:
		p.line("network policy revision %d of %s: applied in %s", revision, id, p.elapsed())
		return true, nil
	case w.GetState() != ctrlv1.WorkspaceState_WORKSPACE_STATE_AVAILABLE:
		p.line("network policy revision %d of %s: not applied, the Workspace is %s (its next start applies it)", revision, id, trimEnum(w.GetState().String(), "WORKSPACE_STATE_"))
		return true, nil
	}
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-time.After(followStep):
		return false, nil
	}
}

// notApplied is the error of an update the node failed to apply: ctrl
// then clears network_policy_status, so nothing is confirmed in force.
func notApplied(id string, revision uint64, f *ctrlv1.WorkspaceFailure) error {
	return fmt.Errorf("%s: network policy revision %d not applied, at %s (%s): %s; no policy is confirmed in force (APPLIED -)",
		id, revision, trimEnum(f.GetStage().String(), "FAILURE_STAGE_"), trimEnum(f.GetReason().String(), "FAILURE_REASON_"), f.GetMessage())
}
