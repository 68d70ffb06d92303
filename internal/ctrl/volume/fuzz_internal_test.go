package volume

import (
	"testing"

	"google.golang.org/protobuf/proto"

	ctrlv1 "github.com/kibotos/kibotos/gen/kibotos/ctrl/v1"
	"github.com/kibotos/kibotos/internal/testenv/reqfuzz"
)

// FuzzCreateVolumeJSON: any bytes a JSON client sends, decoded as a
// CreateVolumeRequest, go through the checks Create makes before it
// touches the database (validateCreate) without a panic, with the same
// decision each time, refusals invalid_argument; an accepted request is
// accepted again after a protojson and a binary round trip
// (reqfuzz.Check).
func FuzzCreateVolumeJSON(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"command":{"commandId":"c1"}}`,
		`{"command":{"commandId":"c1"},"spec":{"storagePool":"fast","capacityBytes":"1073741824"},` +
			`"labels":{"app.kubernetes.io/name":"db"},"annotations":{"owner":"ops@example.com"}}`,
		`{"command":{"commandId":"c1"},"spec":{"capacityBytes":"1073741825"}}`,
		`{"command":{"commandId":"c1"},"spec":{"capacityBytes":"18446744073709551615"}}`,
		`{"command":{"commandId":"c1"},"spec":{"storagePool":"-bad"}}`,
		`{"command":{"commandId":"c1"},"spec":{"storagePool":"../x"}}`,
		`{"command":{"commandId":"a b"}}`,
		`{"command":{"commandId":"c1"},"labels":{"a/b/c":"x"},"annotations":{"k":"\u0000"}}`,
		`{"command":{"commandId":"c1"},"labels":{"z":"-","a":"-"}}`,
	} {
		f.Add([]byte(s))
	}
	v := &Service{profile: DefaultProfile}
	f.Fuzz(func(t *testing.T, data []byte) {
		reqfuzz.Check(t, data, func(req *ctrlv1.CreateVolumeRequest) ([]proto.Message, error) {
			return nil, v.validateCreate(req)
		})
	})
}
