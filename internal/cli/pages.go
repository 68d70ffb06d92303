package cli

import (
	"errors"

	"connectrpc.com/connect"
)

// listPage is the page size list commands ask for: ctrl's largest, so a
// list of up to that many items is one call. ctrl answers 100 when asked
// for none, and a command that read one page would show the first 100
// items of a longer list as if they were all.
const listPage = 1000

// everyPage reads a list from its first page to its last and returns
// every item: call asks for the page at token ("" for the first), items
// takes a page's items out of its answer.
func everyPage[Res any, PRes interface {
	*Res
	GetNextPageToken() string
}, T any](items func(PRes) []T, call func(token string) (*connect.Response[Res], error)) ([]T, error) {
	var all []T
	token := ""
	for {
		res, err := call(token)
		if err != nil {
			return nil, err
		}
		var msg PRes = res.Msg
		all = append(all, items(msg)...)
		next := msg.GetNextPageToken()
		switch next {
		case "":
			return all, nil
		case token:
			return nil, errors.New("the server answered a page with its own token: the list would never end")
		}
		token = next
	}
}

// rowsOf is a table's rows, one an item.
func rowsOf[T any](items []T, row func(T) []string) [][]string {
	rows := make([][]string, len(items))
	for i, x := range items {
		rows[i] = row(x)
	}
	return rows
}
