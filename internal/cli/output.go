package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// outputFlag is how a command prints what it got: -o table (default),
// json or yaml (the API's response message), or name (KIND/ID lines, as
// kubectl does); -q prints the ids alone and --no-headers drops a table's
// header.
type outputFlag struct {
	format    string
	quiet     bool
	noHeaders bool
}

// register adds -o, -q and --no-headers to every command under c.
func (o *outputFlag) register(c *cobra.Command) {
	c.PersistentFlags().VarP((*formatValue)(o), "output", "o", "output format: table, json or yaml (the API's response message), or name (KIND/ID)")
	c.PersistentFlags().BoolVarP(&o.quiet, "quiet", "q", false, "print only the ids of what the command shows, one a line")
	c.PersistentFlags().BoolVar(&o.noHeaders, "no-headers", false, "print a table without its header line")
}

// is reports whether the format is f.
func (o *outputFlag) is(f string) bool { return o.format == f }

// structured is true for -o json and -o yaml: the response message itself.
func (o *outputFlag) structured() bool { return o.is("json") || o.is("yaml") }

// formatValue is the pflag.Value of -o.
type formatValue outputFlag

func (v *formatValue) String() string {
	if v.format == "" {
		return "table"
	}
	return v.format
}

func (v *formatValue) Set(s string) error {
	switch s {
	case "table", "json", "yaml", "name":
		v.format = s
		return nil
	}
	return fmt.Errorf("unknown output format %q: want table, json, yaml or name", s)
}

func (v *formatValue) Type() string { return "format" }

// print writes msg with -o json or yaml; the first cell of each row with
// -q; KIND/ID (the header's first cell, lower case) with -o name; else
// the table.
func (o *outputFlag) print(w io.Writer, msg proto.Message, header []string, rows [][]string) error {
	switch {
	case o.structured():
		return o.message(w, msg)
	case o.quiet || o.is("name"):
		prefix := ""
		if o.is("name") && len(header) > 0 {
			prefix = strings.ToLower(header[0]) + "/"
		}
		for _, r := range rows {
			if len(r) > 0 {
				fmt.Fprintln(w, prefix+r[0])
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if !o.noHeaders {
		writeRow(tw, header)
	}
	for _, r := range rows {
		writeRow(tw, dashEmpty(r))
	}
	return tw.Flush()
}

// message writes msg as protojson, or as the same document in YAML.
func (o *outputFlag) message(w io.Writer, msg proto.Message) error {
	b, err := stableJSON(msg, true)
	if err != nil {
		return err
	}
	if o.is("yaml") {
		if b, err = jsonToYAML(b); err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// line writes one message per line (-o json of a stream), or a YAML
// document each.
func (o *outputFlag) line(w io.Writer, msg proto.Message) error {
	if o.is("yaml") {
		fmt.Fprintln(w, "---")
		return o.message(w, msg)
	}
	b, err := stableJSON(msg, false)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// stableJSON is msg's protojson with the same spacing from every build:
// protojson puts random spaces into its output, fixed per binary (to keep
// callers from depending on it), so one command's -o json differed from
// one build of kibotos to the next, and diffs and scripts saw it. The
// document is re-spaced as encoding/json would (indented by two spaces, or
// compact), which changes no token.
func stableJSON(msg proto.Message, indent bool) ([]byte, error) {
	b, err := protojson.Marshal(msg)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if indent {
		err = json.Indent(&out, b, "", "  ")
	} else {
		err = json.Compact(&out, b)
	}
	return out.Bytes(), err
}

// jsonToYAML re-encodes a JSON document as block-style YAML (JSON is
// YAML, so the YAML library reads it; only its styles are reset).
func jsonToYAML(b []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	plain(&doc)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// plain drops JSON's flow and quoting styles; the encoder quotes a string
// again where YAML would read it as something else.
func plain(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

// dashEmpty is row with "-" for each empty cell, so that every line of a
// table has as many words as its header (awk and cut count on it) and
// "none" reads the same in every table.
func dashEmpty(row []string) []string {
	out := make([]string, len(row))
	for i, c := range row {
		if out[i] = c; c == "" {
			out[i] = "-"
		}
	}
	return out
}

func writeRow(w io.Writer, cells []string) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}
