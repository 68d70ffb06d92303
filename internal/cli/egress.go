package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/gen/kibotos/ctrl/v1/ctrlv1connect"
)

func egressClient() (ctrlv1connect.EgressServiceClient, error) {
	return onWorkspace(ctrlv1connect.NewEgressServiceClient)
}

var egressHeader = []string{"EGRESS", "PROTOCOL", "ENDPOINT", "TLS", "UDP", "USERNAME", "PASSWORD", "REVISION"}

func egressRow(e *ctrlv1.Egress) []string {
	password := "-"
	if e.GetPasswordSet() {
		password = "set" // the API never returns it
	}
	return []string{
		e.GetEgressId(), trimEnum(e.GetSpec().GetProtocol().String(), "EGRESS_PROTOCOL_"), e.GetSpec().GetEndpoint(),
		strconv.FormatBool(e.GetSpec().GetTls()), strconv.FormatBool(e.GetSpec().GetUdpEnabled()),
		e.GetSpec().GetUsername(), password, strconv.FormatUint(e.GetRevision(), 10),
	}
}

// showEgress prints a response that carries one Egress.
func showEgress[T any, PT interface {
	*T
	proto.Message
	GetEgress() *ctrlv1.Egress
}](cmd *cobra.Command, out *outputFlag, res *connect.Response[T], err error) error {
	if err != nil {
		return err
	}
	var msg PT = res.Msg
	return out.print(cmd.OutOrStdout(), msg, egressHeader, [][]string{egressRow(msg.GetEgress())})
}

var egressProtocols = map[string]ctrlv1.EgressProtocol{
	"socks5": ctrlv1.EgressProtocol_EGRESS_PROTOCOL_SOCKS5, "http-connect": ctrlv1.EgressProtocol_EGRESS_PROTOCOL_HTTP_CONNECT,
}

// egressFlags are the spec flags create and update share. On update only
// the flags given change the stored spec.
type egressFlags struct {
	protocol, endpoint, serverName, username, passwordFile string
	tls, udp, noPassword                                   bool
}

// register adds them to c; --no-password only to an update, the one call
// with a stored password to remove.
func (f *egressFlags) register(c *cobra.Command, update bool) {
	fl := c.Flags()
	fl.StringVar(&f.protocol, "protocol", "", "socks5 or http-connect")
	fl.StringVar(&f.endpoint, "endpoint", "", "the proxy's HOST:PORT")
	fl.BoolVar(&f.tls, "tls", false, "wrap the connection to the proxy in TLS")
	fl.StringVar(&f.serverName, "server-name", "", "name to verify the proxy's certificate against (default: the endpoint host)")
	fl.StringVar(&f.username, "username", "", "username to authenticate to the proxy with")
	fl.StringVar(&f.passwordFile, "password-file", "", "read the password from this file ('-' for stdin); it is never shown again")
	if update {
		fl.BoolVar(&f.noPassword, "no-password", false, "remove the stored password")
	}
	fl.BoolVar(&f.udp, "udp", false, "allow UDP (and udp Resolvers) through this Egress; SOCKS5 only")
}

// apply sets the flags given on spec. passwordStored says the Egress has a
// password: a replaced spec must carry it again, since it is never returned.
func (f *egressFlags) apply(c *cobra.Command, spec *ctrlv1.EgressSpec, passwordStored bool) error {
	fl := c.Flags()
	if fl.Changed("protocol") {
		p, ok := egressProtocols[f.protocol]
		if !ok {
			return fmt.Errorf("--protocol %q: want socks5 or http-connect", f.protocol)
		}
		spec.Protocol = p
	}
	set := func(name string, dst *string, v string) {
		if fl.Changed(name) {
			*dst = v
		}
	}
	set("endpoint", &spec.Endpoint, f.endpoint)
	set("server-name", &spec.ServerName, f.serverName)
	set("username", &spec.Username, f.username)
	if fl.Changed("tls") {
		spec.Tls = f.tls
	}
	if fl.Changed("udp") {
		spec.UdpEnabled = f.udp
	}
	switch {
	case f.passwordFile != "" && f.noPassword:
		return errors.New("--password-file and --no-password exclude each other")
	case f.passwordFile != "":
		p, err := readSecret(c.InOrStdin(), f.passwordFile)
		if err != nil {
			return err
		}
		spec.Password = p
	case passwordStored && !f.noPassword:
		return errors.New("the stored password is never returned, so an update must send it again: give --password-file, or --no-password to remove it")
	}
	return nil
}

// readSecret reads a password from path, or stdin for "-", without its
// final newline.
func readSecret(stdin io.Reader, path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(stdin, 4096))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("read the password: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func newEgressCommand(out *outputFlag) *cobra.Command {
	c := &cobra.Command{Use: "egress", Short: "Create, inspect, update and delete Egresses (caller-owned proxies a network policy forwards through)"}
	var commandID string
	commandFlag := func(cmd *cobra.Command) {
		cmd.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	}

	list := &cobra.Command{
		Use: "list", Short: "List Egresses", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			selector, _ := cmd.Flags().GetString("selector")
			client, err := egressClient()
			if err != nil {
				return err
			}
			all, err := everyPage((*ctrlv1.ListEgressesResponse).GetEgresses, func(token string) (*connect.Response[ctrlv1.ListEgressesResponse], error) {
				return client.ListEgresses(cmd.Context(), connect.NewRequest(&ctrlv1.ListEgressesRequest{LabelSelector: selector, PageSize: listPage, PageToken: token}))
			})
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), &ctrlv1.ListEgressesResponse{Egresses: all}, egressHeader, rowsOf(all, egressRow))
		},
	}
	list.Flags().StringP("selector", "l", "", "label selector")

	get := &cobra.Command{
		Use: "get EGRESS_ID", Short: "Show one Egress (its password never: PASSWORD says whether one is set)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := egressClient()
			if err != nil {
				return err
			}
			res, err := client.GetEgress(cmd.Context(), connect.NewRequest(&ctrlv1.GetEgressRequest{EgressId: args[0]}))
			return showEgress(cmd, out, res, err)
		},
	}

	var spec egressFlags
	var labels map[string]string
	create := &cobra.Command{
		Use: "create", Short: "Create an Egress", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := &ctrlv1.EgressSpec{}
			if err := spec.apply(cmd, s, false); err != nil {
				return err
			}
			client, err := egressClient()
			if err != nil {
				return err
			}
			res, err := client.CreateEgress(cmd.Context(), connect.NewRequest(&ctrlv1.CreateEgressRequest{Command: newCommandMetadata(commandID), Spec: s, Labels: labels}))
			return showEgress(cmd, out, res, err)
		},
	}
	spec.register(create, false)
	create.Flags().StringToStringVar(&labels, "label", nil, "label KEY=VALUE (repeatable)")
	commandFlag(create)

	c.AddCommand(list, get, create, newEgressUpdateCommand(out), newEgressDeleteCommand(out))
	return c
}

func newEgressUpdateCommand(out *outputFlag) *cobra.Command {
	var spec egressFlags
	var commandID string
	var expected uint64
	var drain uint32
	update := &cobra.Command{
		Use:   "update EGRESS_ID",
		Short: "Change an Egress's spec: the flags given replace those fields; connections on the old revision drain for --drain-seconds",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := egressClient()
			if err != nil {
				return err
			}
			cur, err := client.GetEgress(cmd.Context(), connect.NewRequest(&ctrlv1.GetEgressRequest{EgressId: args[0]}))
			if err != nil {
				return err
			}
			e := cur.Msg.GetEgress()
			s := proto.Clone(e.GetSpec()).(*ctrlv1.EgressSpec)
			if s == nil {
				s = &ctrlv1.EgressSpec{}
			}
			if err := spec.apply(cmd, s, e.GetPasswordSet()); err != nil {
				return err
			}
			if !cmd.Flags().Changed("expected-revision") {
				expected = e.GetRevision()
			}
			res, err := client.UpdateEgress(cmd.Context(), connect.NewRequest(&ctrlv1.UpdateEgressRequest{
				Command: newCommandMetadata(commandID), EgressId: args[0], ExpectedRevision: expected, Spec: s, DrainSeconds: drain,
			}))
			return showEgress(cmd, out, res, err)
		},
	}
	spec.register(update, true)
	update.Flags().Uint64Var(&expected, "expected-revision", 0, "revision the update applies to (default: the one just read)")
	update.Flags().Uint32Var(&drain, "drain-seconds", 0, "how long connections on the previous revision stay open")
	update.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return update
}

func newEgressDeleteCommand(out *outputFlag) *cobra.Command {
	var commandID string
	del := &cobra.Command{
		Use: "delete EGRESS_ID", Short: "Delete an Egress no Workspace's network policy names", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := egressClient()
			if err != nil {
				return err
			}
			res, err := client.DeleteEgress(cmd.Context(), connect.NewRequest(&ctrlv1.DeleteEgressRequest{Command: newCommandMetadata(commandID), EgressId: args[0]}))
			return showEgress(cmd, out, res, err)
		},
	}
	del.Flags().StringVar(&commandID, "command-id", "", "command_id to send (retrying with the same id is safe)")
	return del
}
