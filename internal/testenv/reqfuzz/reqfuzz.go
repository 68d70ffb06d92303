// Package reqfuzz holds the property the fuzz targets of the request
// validators check: a request decoded from any bytes with protojson (what
// a Connect JSON client sends) is validated without panicking, the same
// way each time, and a request the validator accepts survives the JSON and
// binary wire encodings unchanged and is accepted again with the same
// results.
package reqfuzz

import (
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Validate is the pure check of a request: what it derives to store (a
// normalised policy, a binding with its defaults) or an error.
type Validate[M proto.Message] func(M) ([]proto.Message, error)

// Check decodes data as an M with protojson (bytes it refuses are no
// request and are skipped) and checks validate on it:
//
//   - it refuses only with invalid_argument;
//   - it decides the same twice, with the same results or error text;
//   - an accepted request encodes with protojson and with the binary wire
//     format, decodes to an equal message each time, and that message is
//     accepted with equal results.
func Check[M proto.Message](t *testing.T, data []byte, validate Validate[M]) {
	t.Helper()
	var zero M
	newM := func() M { return zero.ProtoReflect().Type().New().Interface().(M) }
	req := newM()
	if err := protojson.Unmarshal(data, req); err != nil {
		return
	}
	res, err := validate(req)
	again, err2 := validate(req)
	if !sameOutcome(res, err, again, err2) {
		t.Fatalf("validating %v twice: %v, %v; then %v, %v", req, res, err, again, err2)
	}
	if err != nil {
		if connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("%v refused with %v; want invalid_argument", req, err)
		}
		return
	}
	js, err := protojson.Marshal(req)
	if err != nil {
		t.Fatalf("accepted %v, which protojson cannot encode: %v", req, err)
	}
	bin, err := proto.Marshal(req)
	if err != nil {
		t.Fatalf("accepted %v, which the wire format cannot encode: %v", req, err)
	}
	for name, decode := range map[string]func(M) error{
		"protojson": func(m M) error { return protojson.Unmarshal(js, m) },
		"binary":    func(m M) error { return proto.Unmarshal(bin, m) },
	} {
		back := newM()
		if err := decode(back); err != nil {
			t.Fatalf("accepted %v; its %s encoding does not decode: %v", req, name, err)
		}
		if !proto.Equal(back, req) {
			t.Fatalf("accepted %v; after a %s round trip it is %v", req, name, back)
		}
		if r, err := validate(back); !sameOutcome(res, nil, r, err) {
			t.Fatalf("accepted %v with %v; after a %s round trip: %v, %v", req, res, name, r, err)
		}
	}
}

func sameOutcome(a []proto.Message, aerr error, b []proto.Message, berr error) bool {
	if (aerr == nil) != (berr == nil) {
		return false
	}
	if aerr != nil {
		return aerr.Error() == berr.Error()
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
