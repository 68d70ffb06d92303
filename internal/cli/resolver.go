package cli

import (
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

func resolverClient() (ctrlv1connect.ResolverServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewResolverServiceClient)
}

var resolverHeader = []string{"RESOLVER", "PROTOCOL", "UPSTREAM", "SERVER_NAME", "REVISION"}

func resolverRow(r *ctrlv1.Resolver) []string {
	upstream := r.GetSpec().GetAddress()
	if upstream == "" {
		upstream = r.GetSpec().GetUrl()
	}
	return []string{
		r.GetResolverId(), trimEnum(r.GetSpec().GetProtocol().String(), "RESOLVER_PROTOCOL_"), upstream,
		r.GetSpec().GetServerName(), strconv.FormatUint(r.GetRevision(), 10),
	}
}

// showResolver prints a response that carries one Resolver.
func showResolver[T any, PT interface {
	*T
	proto.Message
	GetResolver() *ctrlv1.Resolver
}](cmd *cobra.Command, out *outputFlag, res *connect.Response[T], err error) error {
	if err != nil {
		return err
	}
	var msg PT = res.Msg
	return out.print(cmd.OutOrStdout(), msg, resolverHeader, [][]string{resolverRow(msg.GetResolver())})
}

var resolverProtocols = map[string]ctrlv1.ResolverProtocol{
	"udp": ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_UDP, "tcp": ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TCP,
	"tls": ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_TLS, "https": ctrlv1.ResolverProtocol_RESOLVER_PROTOCOL_HTTPS,
}

// resolverFlags are the spec flags create and update share. On update only
// the flags given change the stored spec.
type resolverFlags struct{ protocol, address, url, serverName string }

func (f *resolverFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.protocol, "protocol", "", "udp, tcp, tls (DNS over TLS) or https (DNS over HTTPS)")
	fl.StringVar(&f.address, "address", "", "the upstream's HOST:PORT (udp, tcp, tls)")
	fl.StringVar(&f.url, "url", "", "the upstream's https:// URL (https)")
	fl.StringVar(&f.serverName, "server-name", "", "name to verify a tls or https upstream against (default: its host)")
}

func (f *resolverFlags) apply(c *cobra.Command, spec *ctrlv1.ResolverSpec) error {
	fl := c.Flags()
	if fl.Changed("protocol") {
		p, ok := resolverProtocols[f.protocol]
		if !ok {
			return fmt.Errorf("--protocol %q: want udp, tcp, tls or https", f.protocol)
		}
		spec.Protocol = p
	}
	// address and url exclude each other: setting one clears the other.
	if fl.Changed("address") {
		spec.Address, spec.Url = f.address, ""
	}
	if fl.Changed("url") {
		spec.Url, spec.Address = f.url, ""
	}
	if fl.Changed("server-name") {
		spec.ServerName = f.serverName
	}
	return nil
}

func newResolverCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "resolver", Short: "Create, inspect, update and delete Resolvers (DNS upstreams a network policy forwards to)"}
	list := &cobra.Command{
		Use: "list", Short: "List Resolvers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			selector, _ := cmd.Flags().GetString("selector")
			client, err := resolverClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*ctrlv1.ListResolversResponse).GetResolvers, func(token string) (*connect.Response[ctrlv1.ListResolversResponse], error) {
				return client.ListResolvers(cmd.Context(), connect.NewRequest(&ctrlv1.ListResolversRequest{LabelSelector: selector, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &ctrlv1.ListResolversResponse{Resolvers: all}, resolverHeader, rowsOf(all, resolverRow))
		},
	}
	list.Flags().StringP("selector", "l", "", "label selector")
	get := &cobra.Command{
		Use: "get RESOLVER_ID", Short: "Show one Resolver", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := resolverClient()
			if err != nil {
				return err
			}
			res, err := client.GetResolver(cmd.Context(), connect.NewRequest(&ctrlv1.GetResolverRequest{ResolverId: args[0]}))
			return showResolver(cmd, out, res, err)
		},
	}
	c.AddCommand(list, get, newResolverCreateCommand(out), newResolverUpdateCommand(out), newResolverDeleteCommand(out))
	return c
}

func newResolverCreateCommand(out *outputFlag) *cobra.Command {
	var spec resolverFlags
	var labels map[string]string
	var commandID string
	create := &cobra.Command{
		Use: "create", Short: "Create a Resolver", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := &ctrlv1.ResolverSpec{}
			if err := spec.apply(cmd, s); err != nil {
				return err
			}
			client, err := resolverClient()
			if err != nil {
				return err
			}
			res, err := client.CreateResolver(cmd.Context(), connect.NewRequest(&ctrlv1.CreateResolverRequest{Command: newCommandMetadata(commandID), Spec: s, Labels: labels}))
			return showResolver(cmd, out, res, err)
		},
	}
	spec.register(create)
	create.Flags().StringToStringVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	create.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return create
}

func newResolverUpdateCommand(out *outputFlag) *cobra.Command {
	var spec resolverFlags
	var commandID string
	var expected uint64
	update := &cobra.Command{
		Use: "update RESOLVER_ID", Short: "Change a Resolver's spec: the flags given replace those fields", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := resolverClient()
			if err != nil {
				return err
			}
			cur, err := client.GetResolver(cmd.Context(), connect.NewRequest(&ctrlv1.GetResolverRequest{ResolverId: args[0]}))
			if err != nil {
				return err
			}
			s := proto.Clone(cur.Msg.GetResolver().GetSpec()).(*ctrlv1.ResolverSpec)
			if s == nil {
				s = &ctrlv1.ResolverSpec{}
			}
			if err := spec.apply(cmd, s); err != nil {
				return err
			}
			if !cmd.Flags().Changed("expected-revision") {
				expected = cur.Msg.GetResolver().GetRevision()
			}
			res, err := client.UpdateResolver(cmd.Context(), connect.NewRequest(&ctrlv1.UpdateResolverRequest{
				Command: newCommandMetadata(commandID), ResolverId: args[0], ExpectedRevision: expected, Spec: s,
			}))
			return showResolver(cmd, out, res, err)
		},
	}
	spec.register(update)
	update.Flags().Uint64Var(&expected, "expected-revision", 0, "revision the update applies to (default: the one just read)")
	update.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return update
}

func newResolverDeleteCommand(out *outputFlag) *cobra.Command {
	var commandID string
	del := &cobra.Command{
		Use: "delete RESOLVER_ID", Short: "Delete a Resolver no Workspace's network policy names", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := resolverClient()
			if err != nil {
				return err
			}
			res, err := client.DeleteResolver(cmd.Context(), connect.NewRequest(&ctrlv1.DeleteResolverRequest{Command: newCommandMetadata(commandID), ResolverId: args[0]}))
			return showResolver(cmd, out, res, err)
		},
	}
	del.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return del
}
