package cli

import (
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	operatorv1 "github.com/kibotos/kibotos/gen/kibotos/operator/v1"
	"github.com/kibotos/kibotos/gen/kibotos/operator/v1/operatorv1connect"
)

func enrollmentClient() (operatorv1connect.EnrollmentServiceClient, error) {
	return onOperator(operatorv1connect.NewEnrollmentServiceClient)
}

var grantHeader = []string{"GRANT", "STATE", "NODE", "REUSABLE", "EXPIRES"}

func grantRow(g *operatorv1.EnrollmentGrant) []string {
	return []string{
		g.GetGrantId(), trimEnum(g.GetState().String(), "ENROLLMENT_GRANT_STATE_"), g.GetNodeId(),
		fmt.Sprint(g.GetReusable()), g.GetExpiresAt().AsTime().Format(time.RFC3339),
	}
}

func newEnrollmentCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "enrollment", Short: "Create, list and revoke node enrollment grants (operator)"}
	var nodeID, commandID string
	var reusable bool
	var ttl time.Duration
	create := &cobra.Command{
		Use: "create", Short: "Create an enrollment grant; its secret is shown once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, err := enrollmentClient()
			if err != nil {
				return err
			}
			req := &operatorv1.CreateEnrollmentGrantRequest{Command: newCommandMetadata(commandID), NodeId: nodeID, Reusable: reusable}
			if ttl > 0 {
				req.Ttl = durationpb.New(ttl)
			}
			res, err := client.CreateEnrollmentGrant(cmd.Context(), connect.NewRequest(req))
			if err != nil {
				return err
			}
			if out.structured() {
				return out.print(cmd.OutOrStdout(), res.Msg, nil, nil)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "grant %s; start the node with:\n  KIBOTOS_ENROLLMENT_GRANT=%s kibotos node --node-id %s ...\n",
				res.Msg.GetGrant().GetGrantId(), res.Msg.GetSecret(), or(nodeID, "NODE_ID"))
			return nil
		},
	}
	create.Flags().StringVar(&nodeID, "node-id", "", "bind the grant to this node_id")
	create.Flags().BoolVar(&reusable, "reusable", false, "let the grant enroll any number of nodes until it expires")
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long the grant stays usable (default 24h)")
	create.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")

	list := &cobra.Command{
		Use: "list", Short: "List enrollment grants", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, _ := cmd.Flags().GetBool("all")
			client, err := enrollmentClient()
			if err != nil {
				return err
			}
			grants, err := everyPage((*operatorv1.ListEnrollmentGrantsResponse).GetGrants, func(token string) (*connect.Response[operatorv1.ListEnrollmentGrantsResponse], error) {
				return client.ListEnrollmentGrants(cmd.Context(), connect.NewRequest(&operatorv1.ListEnrollmentGrantsRequest{IncludeInactive: all, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &operatorv1.ListEnrollmentGrantsResponse{Grants: grants}, grantHeader, rowsOf(grants, grantRow))
		},
	}
	list.Flags().Bool("all", false, "include consumed, expired and revoked grants")

	revoke := &cobra.Command{
		Use: "revoke GRANT_ID", Short: "Revoke an enrollment grant", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := enrollmentClient()
			if err != nil {
				return err
			}
			res, err := client.RevokeEnrollmentGrant(cmd.Context(), connect.NewRequest(&operatorv1.RevokeEnrollmentGrantRequest{Command: newCommandMetadata(commandID), GrantId: args[0]}))
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), res.Msg, grantHeader, [][]string{grantRow(res.Msg.GetGrant())})
		},
	}
	revoke.Flags().StringVar(&commandID, "command-id", "", "command_id to send")
	c.AddCommand(create, list, revoke)
	return c
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}
