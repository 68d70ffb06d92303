package cli

import (
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

var sessionHeader = []string{"SESSION", "GENERATION", "SCOPES", "EXPIRES", "ENDPOINT", "TOKEN"}

func sessionRow(s *ctrlv1.DataPlaneSession) []string {
	scopes := make([]string, 0, len(s.GetScopes()))
	for _, sc := range s.GetScopes() {
		scopes = append(scopes, strings.ToLower(trimEnum(sc.String(), "DATA_PLANE_SCOPE_")))
	}
	return []string{s.GetSessionId(), strconv.FormatUint(s.GetGeneration(), 10), strings.Join(scopes, ","),
		s.GetExpiresAt().AsTime().UTC().Format(time.RFC3339), s.GetEndpoint(), s.GetToken()}
}

// newSessionCommand is `kibotos workspace session`: SessionService's
// data-plane sessions, the tokens a caller hands an agent instead of its
// API key.
func newSessionCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{
		Use:   "session",
		Short: "Issue, rotate and revoke data-plane sessions: tokens for one Workspace's processes, files and metrics",
		Long: `A data-plane session is a short-lived token that works for one Workspace's
current execution only, for the scopes it was issued with (process, file,
desktop, service, metrics). Hand it to an agent instead of an API key: with
KIBOTOS_TOKEN set to it (and KIBOTOS_WORKSPACE_ENDPOINT to the session's
endpoint), "kibotos workspace exec" and "files" work within its scopes and
nothing else does. A stop, a delete or a new start ends it.

issue and rotate print the token, and nothing shows it again: treat it as a
password (-o json carries it for scripts).`,
	}
	var ttl time.Duration
	var scopes []string
	issue := &cobra.Command{
		Use: "issue WORKSPACE_ID", Short: "Issue a session for the Workspace's current execution and print its token", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &ctrlv1.IssueDataPlaneSessionRequest{WorkspaceId: args[0], Ttl: optionalDuration(ttl)}
			for _, s := range scopes {
				sc, err := dataPlaneScope(s)
				if err != nil {
					return err
				}
				req.Scopes = append(req.Scopes, sc)
			}
			client, err := onWorkspace(ctrlv1connect.NewSessionServiceClient)
			if err != nil {
				return err
			}
			res, err := client.IssueDataPlaneSession(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, sessionHeader, [][]string{sessionRow(res.Msg.GetSession())})
		},
	}
	issue.Flags().DurationVar(&ttl, "ttl", 0, "how long the token is valid, 1m to 24h (default 15m)")
	issue.Flags().StringSliceVar(&scopes, "scope", nil, "what it may use: process, file, desktop, service, metrics (repeatable or comma-separated; default all)")

	rotate := &cobra.Command{
		Use: "rotate WORKSPACE_ID SESSION_ID", Short: "Give a session a new token (the old one works for at most a minute more)", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := onWorkspace(ctrlv1connect.NewSessionServiceClient)
			if err != nil {
				return err
			}
			res, err := client.RotateDataPlaneSession(cmd.Context(), connect.NewRequest(&ctrlv1.RotateDataPlaneSessionRequest{WorkspaceId: args[0], SessionId: args[1], Ttl: optionalDuration(ttl)}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, sessionHeader, [][]string{sessionRow(res.Msg.GetSession())})
		},
	}
	rotate.Flags().DurationVar(&ttl, "ttl", 0, "how long the new token is valid, 1m to 24h (default 15m)")

	revoke := &cobra.Command{
		Use: "revoke WORKSPACE_ID SESSION_ID", Short: "End a session now: its tokens stop working and its streams end", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := onWorkspace(ctrlv1connect.NewSessionServiceClient)
			if err != nil {
				return err
			}
			res, err := client.RevokeDataPlaneSession(cmd.Context(), connect.NewRequest(&ctrlv1.RevokeDataPlaneSessionRequest{WorkspaceId: args[0], SessionId: args[1]}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, []string{"SESSION", "REVOKED"}, [][]string{{args[1], "true"}})
		},
	}
	c.AddCommand(issue, rotate, revoke)
	return c
}

// optionalDuration is a flag's duration on the wire: absent when zero, so
// ctrl's default applies.
func optionalDuration(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// dataPlaneScope reads process, FILE or DATA_PLANE_SCOPE_METRICS.
func dataPlaneScope(s string) (ctrlv1.DataPlaneScope, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "DATA_PLANE_SCOPE_")
	if v, ok := ctrlv1.DataPlaneScope_value["DATA_PLANE_SCOPE_"+name]; ok && v != 0 {
		return ctrlv1.DataPlaneScope(v), nil
	}
	return 0, fmt.Errorf("scope %q: want process, file, desktop, service or metrics", s)
}
