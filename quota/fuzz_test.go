package quota

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/flexiq/flexiq/api"
)

// FuzzDecode checks that Decode never panics, refuses only with an
// INVALID_QUOTA error, accepts only valid JSON, and that every accepted
// document survives Encode: it decodes again to an Equal document and Encode
// is a fixed point. Merging into the empty document must agree with Decode.
// The checked-in corpus is testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"max_pending":10}`,
		`{"max_pending":0,"on_excess":"drop"}`,
		`{"enqueue_rate":"500/s"}`,
		`{"enqueue_rate":"1/m","max_running":3}`,
		`{"max_dead_rows":6,"max_archived_rows":5,"max_running":4,"enqueue_rate":"3/h","on_excess":"reject","max_pending":1}`,
		`{"max_pending":null}`,
		`{"max_pending":-1}`,
		`{"max_pending":"10"}`,
		`{"max_pending":1.5}`,
		`{"max_pending":1e3}`,
		`{"MAX_PENDING":10}`,
		`{"max_pending":1,"max_pending":2}`,
		`{"enqueue_rate":"0/s"}`,
		`{"enqueue_rate":500}`,
		`{"enqueue_rate":"05/s"}`,
		`{"enqueue_rate":"5\/s"}`,
		`{"max\u005fpending":1}`,
		`{} {}`,
		`{}}`,
		"\v{}",
		`null`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data)
		if err != nil {
			e, ok := err.(*api.Error)
			if !ok || e.Code != api.CodeInvalidArgument || e.Reason != api.ReasonInvalidQuota {
				t.Fatalf("Decode(%q) error = %#v, want *api.Error INVALID_ARGUMENT/INVALID_QUOTA", data, err)
			}
			if !d.IsEmpty() {
				t.Fatalf("Decode(%q) refused but returned %s, want the zero Document", data, d.Encode())
			}
		} else if !json.Valid(data) {
			t.Fatalf("Decode(%q) accepted input that is not valid JSON", data)
		}

		m, merr := Document{}.Merge(data)
		if (err == nil) != (merr == nil) {
			t.Fatalf("input %q: Decode error %v, Document{}.Merge error %v; want both or neither", data, err, merr)
		}
		if err != nil {
			return
		}
		if !m.Equal(d) {
			t.Fatalf("input %q: Document{}.Merge = %s, Decode = %s; want equal", data, m.Encode(), d.Encode())
		}

		enc := d.Encode()
		if !json.Valid(enc) {
			t.Fatalf("Decode(%q).Encode() = %q is not valid JSON", data, enc)
		}
		d2, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(%q).Encode() = %s, which Decode refuses: %v", data, enc, err)
		}
		if !d2.Equal(d) {
			t.Fatalf("input %q: decode(encode(d)) = %s, want Equal to d = %s", data, d2.Encode(), enc)
		}
		if enc2 := d2.Encode(); !bytes.Equal(enc2, enc) {
			t.Fatalf("input %q: encode(decode(encode(d))) = %s, want the fixed point %s", data, enc2, enc)
		}
	})
}
