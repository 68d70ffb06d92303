package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// outputFlag is -o: table (default) or json.
type outputFlag string

func (o *outputFlag) String() string {
	if *o == "" {
		return "table"
	}
	return string(*o)
}

func (o *outputFlag) Set(v string) error {
	switch v {
	case "table", "json":
		*o = outputFlag(v)
		return nil
	}
	return fmt.Errorf("unknown output format %q: want table or json", v)
}

func (o *outputFlag) Type() string { return "format" }

// print writes msg as protojson with -o json, else the rows of table.
func (o *outputFlag) print(w io.Writer, msg proto.Message, header []string, rows [][]string) error {
	if *o == "json" {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(msg)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	writeRow(tw, header)
	for _, r := range rows {
		writeRow(tw, r)
	}
	return tw.Flush()
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
