package quota

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
)

func i64(v int64) *int64 { return &v }

// checkQuotaError fails t unless err is an *api.Error INVALID_ARGUMENT /
// INVALID_QUOTA whose message contains mention (when mention is not empty).
func checkQuotaError(t *testing.T, what string, err error, mention string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want INVALID_ARGUMENT/INVALID_QUOTA naming %q", what, mention)
	}
	e, ok := err.(*api.Error)
	if !ok {
		t.Fatalf("%s: got error of type %T (%v), want *api.Error", what, err, err)
	}
	if e.Code != api.CodeInvalidArgument || e.Reason != api.ReasonInvalidQuota {
		t.Fatalf("%s: got code %s reason %s, want INVALID_ARGUMENT / INVALID_QUOTA (message %q)", what, e.Code, e.Reason, e.Message)
	}
	if !strings.HasPrefix(e.Message, "invalid quota: ") {
		t.Fatalf("%s: message %q does not start with %q", what, e.Message, "invalid quota: ")
	}
	if mention != "" && !strings.Contains(e.Message, mention) {
		t.Fatalf("%s: message %q does not name %q", what, e.Message, mention)
	}
}

func TestDecodeAccepts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // canonical encoding of the decoded document
	}{
		{"empty object", `{}`, `{}`},
		{"empty object with JSON whitespace", " \t\r\n{ \n}\r\n\t ", `{}`},
		{"max_pending", `{"max_pending":10}`, `{"max_pending":10}`},
		{"on_excess reject", `{"on_excess":"reject"}`, `{"on_excess":"reject"}`},
		{"on_excess drop", `{"on_excess":"drop"}`, `{"on_excess":"drop"}`},
		{"enqueue_rate per second", `{"enqueue_rate":"500/s"}`, `{"enqueue_rate":"500/s"}`},
		{"enqueue_rate per minute", `{"enqueue_rate":"1/m"}`, `{"enqueue_rate":"1/m"}`},
		{"enqueue_rate per hour", `{"enqueue_rate":"3/h"}`, `{"enqueue_rate":"3/h"}`},
		{"enqueue_rate largest count", `{"enqueue_rate":"9223372036854775807/s"}`, `{"enqueue_rate":"9223372036854775807/s"}`},
		{"enqueue_rate leading zero kept as written", `{"enqueue_rate":"05/s"}`, `{"enqueue_rate":"05/s"}`},
		{"enqueue_rate escaped slash", `{"enqueue_rate":"5\/s"}`, `{"enqueue_rate":"5/s"}`},
		{"max_running", `{"max_running":3}`, `{"max_running":3}`},
		{"max_archived_rows", `{"max_archived_rows":1000}`, `{"max_archived_rows":1000}`},
		{"max_dead_rows", `{"max_dead_rows":7}`, `{"max_dead_rows":7}`},

		{"zero max_pending", `{"max_pending":0}`, `{"max_pending":0}`},
		{"zero max_running", `{"max_running":0}`, `{"max_running":0}`},
		{"zero max_archived_rows", `{"max_archived_rows":0}`, `{"max_archived_rows":0}`},
		{"zero max_dead_rows", `{"max_dead_rows":0}`, `{"max_dead_rows":0}`},
		{"negative zero is zero", `{"max_pending":-0}`, `{"max_pending":0}`},
		{"largest int64", `{"max_pending":9223372036854775807}`, `{"max_pending":9223372036854775807}`},

		{"null max_pending is unset", `{"max_pending":null}`, `{}`},
		{"null on_excess is unset", `{"on_excess":null}`, `{}`},
		{"null enqueue_rate is unset", `{"enqueue_rate":null}`, `{}`},
		{"null max_running is unset", `{"max_running":null}`, `{}`},
		{"null max_archived_rows is unset", `{"max_archived_rows":null}`, `{}`},
		{"null max_dead_rows is unset", `{"max_dead_rows":null}`, `{}`},
		{"null beside a value", `{"max_pending":null,"max_running":2}`, `{"max_running":2}`},

		{"every field, any order, canonical out",
			`{"max_dead_rows":6,"max_archived_rows":5,"max_running":4,"enqueue_rate":"3/h","on_excess":"drop","max_pending":1}`,
			`{"max_pending":1,"on_excess":"drop","enqueue_rate":"3/h","max_running":4,"max_archived_rows":5,"max_dead_rows":6}`},
		{"whitespace inside", "{ \"max_pending\" :\t10 ,\n\"on_excess\" : \"drop\" }", `{"max_pending":10,"on_excess":"drop"}`},
		{"escaped key is the same key", `{"max\u005fpending":1}`, `{"max_pending":1}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode([]byte(tc.in))
			if err != nil {
				t.Fatalf("Decode(%q): got error %v, want %s", tc.in, err, tc.want)
			}
			if got := string(d.Encode()); got != tc.want {
				t.Fatalf("Decode(%q).Encode() = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestDecodeFieldValues(t *testing.T) {
	d, err := Decode([]byte(`{"max_pending":1,"on_excess":"drop","enqueue_rate":"500/s","max_running":2,"max_archived_rows":3,"max_dead_rows":4}`))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	for _, c := range []struct {
		name string
		got  *int64
		want int64
	}{
		{"MaxPending", d.MaxPending, 1},
		{"MaxRunning", d.MaxRunning, 2},
		{"MaxArchivedRows", d.MaxArchivedRows, 3},
		{"MaxDeadRows", d.MaxDeadRows, 4},
	} {
		if c.got == nil || *c.got != c.want {
			t.Fatalf("%s = %v, want pointer to %d", c.name, c.got, c.want)
		}
	}
	if d.OnExcess != Drop || d.Excess() != Drop {
		t.Fatalf("OnExcess = %q, Excess() = %q, want drop", d.OnExcess, d.Excess())
	}
	want := Rate{Count: 500, Unit: time.Second, Text: "500/s"}
	if d.EnqueueRate == nil || *d.EnqueueRate != want {
		t.Fatalf("EnqueueRate = %+v, want %+v", d.EnqueueRate, want)
	}

	for _, rc := range []struct {
		text string
		want Rate
	}{
		{"1/m", Rate{Count: 1, Unit: time.Minute, Text: "1/m"}},
		{"3/h", Rate{Count: 3, Unit: time.Hour, Text: "3/h"}},
		{"007/s", Rate{Count: 7, Unit: time.Second, Text: "007/s"}},
	} {
		r, err := ParseRate(rc.text)
		if err != nil || r != rc.want {
			t.Fatalf("ParseRate(%q) = %+v, %v; want %+v, nil", rc.text, r, err, rc.want)
		}
	}

	empty, err := Decode([]byte(`{}`))
	if err != nil {
		t.Fatalf("Decode({}): %v", err)
	}
	if !empty.IsEmpty() || empty.MaxPending != nil || empty.EnqueueRate != nil || empty.OnExcess != "" {
		t.Fatalf("Decode({}) = %+v, want every field unset", empty)
	}
	if empty.Excess() != Reject {
		t.Fatalf("unset on_excess: Excess() = %q, want reject", empty.Excess())
	}
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		mention string // what the message must name; "" = no particular field
	}{
		// Negative limits.
		{"negative max_pending", `{"max_pending":-1}`, "max_pending"},
		{"negative max_running", `{"max_running":-5}`, "max_running"},
		{"negative max_archived_rows", `{"max_archived_rows":-1}`, "max_archived_rows"},
		{"negative max_dead_rows", `{"max_dead_rows":-9223372036854775808}`, "max_dead_rows"},
		{"below int64", `{"max_pending":-9223372036854775809}`, "max_pending"},
		{"above int64", `{"max_pending":9223372036854775808}`, "max_pending"},
		{"far above int64", `{"max_pending":1e400}`, "max_pending"},

		// Wrong types.
		{"string number", `{"max_pending":"10"}`, "max_pending"},
		{"fraction", `{"max_pending":1.5}`, "max_pending"},
		{"integral fraction", `{"max_running":1.0}`, "max_running"},
		{"exponent", `{"max_pending":1e3}`, "max_pending"},
		{"negative fraction", `{"max_pending":-1.5}`, "max_pending"},
		{"bool", `{"max_pending":true}`, "max_pending"},
		{"array", `{"max_archived_rows":[1]}`, "max_archived_rows"},
		{"object", `{"max_dead_rows":{}}`, "max_dead_rows"},
		{"empty string", `{"max_running":""}`, "max_running"},

		// Unknown fields, case-sensitive names.
		{"unknown field", `{"max_jobs":1}`, `"max_jobs"`},
		{"upper-case name", `{"MAX_PENDING":10}`, `"MAX_PENDING"`},
		{"mixed-case name", `{"Max_Pending":10}`, `"Max_Pending"`},
		{"name with trailing space", `{"max_pending ":10}`, `"max_pending "`},
		{"empty name", `{"":1}`, `""`},
		{"unknown field with null", `{"burst":null}`, `"burst"`},
		{"unknown beside known", `{"max_pending":1,"extra":2}`, `"extra"`},

		// Duplicates.
		{"duplicate key", `{"max_pending":1,"max_pending":2}`, "max_pending"},
		{"duplicate key same value", `{"on_excess":"drop","on_excess":"drop"}`, "on_excess"},
		{"duplicate key null then value", `{"max_running":null,"max_running":1}`, "max_running"},

		// Not an object.
		{"empty input", ``, ""},
		{"only whitespace", " \n\t", ""},
		{"null document", `null`, ""},
		{"array document", `[]`, ""},
		{"array of object", `[{}]`, ""},
		{"string document", `"max_pending"`, ""},
		{"number document", `1`, ""},
		{"bool document", `true`, ""},

		// Not JSON, or data after the object.
		{"unterminated", `{`, ""},
		{"unterminated after field", `{"max_pending":1`, ""},
		{"missing value", `{"max_pending":}`, "max_pending"},
		{"missing colon", `{"max_pending" 1}`, "max_pending"},
		{"trailing comma", `{"max_pending":1,}`, ""},
		{"missing comma", `{"max_pending":1 "max_running":2}`, ""},
		{"unquoted key", `{max_pending:1}`, ""},
		{"single-quoted key", `{'max_pending':1}`, ""},
		{"leading zero", `{"max_pending":01}`, ""}, // a syntax error after the value 0
		{"plus sign", `{"max_pending":+1}`, "max_pending"},
		{"second object", `{} {}`, "data after the object"},
		{"trailing brace", `{}}`, "data after the object"},
		{"trailing bracket", `{}]`, "data after the object"},
		{"trailing brace after field", `{"max_pending":1}}`, "data after the object"},
		{"trailing comma after object", `{},`, "data after the object"},
		{"trailing word", `{"max_pending":1}x`, "data after the object"},
		{"trailing NUL", "{}\x00", "data after the object"},
		{"vertical tab before", "\v{}", ""},
		{"form feed after", "{}\f", "data after the object"},
		{"no-break space before", "\u00a0{}", ""},
		{"no-break space after", "{}\u00a0", "data after the object"},
		{"NEL after", "{}\u0085", "data after the object"},
		{"byte order mark", "\ufeff{}", ""},

		// on_excess values.
		{"on_excess upper case", `{"on_excess":"REJECT"}`, "on_excess"},
		{"on_excess capitalised", `{"on_excess":"Drop"}`, "on_excess"},
		{"on_excess empty", `{"on_excess":""}`, "on_excess"},
		{"on_excess other word", `{"on_excess":"shed"}`, "on_excess"},
		{"on_excess padded", `{"on_excess":" drop"}`, "on_excess"},
		{"on_excess number", `{"on_excess":1}`, "on_excess"},
		{"on_excess bool", `{"on_excess":true}`, "on_excess"},
		{"on_excess array", `{"on_excess":["drop"]}`, "on_excess"},

		// enqueue_rate values.
		{"rate zero count", `{"enqueue_rate":"0/s"}`, "enqueue_rate"},
		{"rate zero count padded", `{"enqueue_rate":"000/s"}`, "enqueue_rate"},
		{"rate negative count", `{"enqueue_rate":"-1/s"}`, "enqueue_rate"},
		{"rate plus sign", `{"enqueue_rate":"+5/s"}`, "enqueue_rate"},
		{"rate day unit", `{"enqueue_rate":"5/d"}`, "enqueue_rate"},
		{"rate no unit", `{"enqueue_rate":"5"}`, "enqueue_rate"},
		{"rate no count", `{"enqueue_rate":"/s"}`, "enqueue_rate"},
		{"rate empty unit", `{"enqueue_rate":"5/"}`, "enqueue_rate"},
		{"rate only slash", `{"enqueue_rate":"/"}`, "enqueue_rate"},
		{"rate empty", `{"enqueue_rate":""}`, "enqueue_rate"},
		{"rate leading space", `{"enqueue_rate":" 5/s"}`, "enqueue_rate"},
		{"rate trailing space", `{"enqueue_rate":"5/s "}`, "enqueue_rate"},
		{"rate inner space", `{"enqueue_rate":"5 /s"}`, "enqueue_rate"},
		{"rate upper-case unit", `{"enqueue_rate":"5/S"}`, "enqueue_rate"},
		{"rate long unit", `{"enqueue_rate":"5/sec"}`, "enqueue_rate"},
		{"rate Go duration unit", `{"enqueue_rate":"5/1s"}`, "enqueue_rate"},
		{"rate fraction", `{"enqueue_rate":"1.5/s"}`, "enqueue_rate"},
		{"rate double slash", `{"enqueue_rate":"5//s"}`, "enqueue_rate"},
		{"rate two units", `{"enqueue_rate":"5/s/s"}`, "enqueue_rate"},
		{"rate unicode digit", `{"enqueue_rate":"٥/s"}`, "enqueue_rate"},
		{"rate count overflow", `{"enqueue_rate":"9223372036854775808/s"}`, "enqueue_rate"},
		{"rate as number", `{"enqueue_rate":500}`, "enqueue_rate"},
		{"rate as bool", `{"enqueue_rate":true}`, "enqueue_rate"},
		{"rate as array", `{"enqueue_rate":["5/s"]}`, "enqueue_rate"},
		{"rate as object", `{"enqueue_rate":{"count":5,"unit":"s"}}`, "enqueue_rate"},

		// One bad field refuses the whole document.
		{"good fields and one bad", `{"max_pending":1,"on_excess":"drop","max_running":-1}`, "max_running"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode([]byte(tc.in))
			checkQuotaError(t, "Decode("+strconv.Quote(tc.in)+")", err, tc.mention)
			if !d.IsEmpty() {
				t.Fatalf("Decode(%q) refused but returned %s, want the zero Document", tc.in, d.Encode())
			}
		})
	}
}

func TestParseRateRefusesWithQuotaError(t *testing.T) {
	for _, s := range []string{"", "0/s", "5/d", "5", "5/S", " 5/s"} {
		_, err := ParseRate(s)
		checkQuotaError(t, "ParseRate("+strconv.Quote(s)+")", err, "enqueue_rate")
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		name string
		doc  Document
		want string
	}{
		{"empty", Document{}, `{}`},
		{"zeros are limits", Document{MaxPending: i64(0), MaxRunning: i64(0), MaxArchivedRows: i64(0), MaxDeadRows: i64(0)},
			`{"max_pending":0,"max_running":0,"max_archived_rows":0,"max_dead_rows":0}`},
		{"every field in canonical order", Document{
			MaxDeadRows: i64(6), MaxArchivedRows: i64(5), MaxRunning: i64(4),
			EnqueueRate: &Rate{Count: 3, Unit: time.Hour, Text: "3/h"}, OnExcess: Drop, MaxPending: i64(1),
		}, `{"max_pending":1,"on_excess":"drop","enqueue_rate":"3/h","max_running":4,"max_archived_rows":5,"max_dead_rows":6}`},
		{"rate text as written", Document{EnqueueRate: &Rate{Count: 5, Unit: time.Second, Text: "005/s"}}, `{"enqueue_rate":"005/s"}`},
		{"rate without text per second", Document{EnqueueRate: &Rate{Count: 500, Unit: time.Second}}, `{"enqueue_rate":"500/s"}`},
		{"rate without text per minute", Document{EnqueueRate: &Rate{Count: 1, Unit: time.Minute}}, `{"enqueue_rate":"1/m"}`},
		{"rate without text per hour", Document{EnqueueRate: &Rate{Count: 3, Unit: time.Hour}}, `{"enqueue_rate":"3/h"}`},
		{"explicit reject kept", Document{OnExcess: Reject}, `{"on_excess":"reject"}`},
		{"only the last field", Document{MaxDeadRows: i64(9)}, `{"max_dead_rows":9}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := string(tc.doc.Encode())
			if got != tc.want {
				t.Fatalf("Encode() = %s, want %s", got, tc.want)
			}
			if m, err := tc.doc.MarshalJSON(); err != nil || string(m) != tc.want {
				t.Fatalf("MarshalJSON() = %s, %v; want %s, nil", m, err, tc.want)
			}
			back, err := Decode([]byte(got))
			if err != nil {
				t.Fatalf("Decode(Encode()) of %s: %v", got, err)
			}
			if !back.Equal(tc.doc) {
				t.Fatalf("Decode(Encode()) = %s, want a document Equal to %s", back.Encode(), got)
			}
		})
	}
}

func TestEncodeIsJSONEvenForOddValues(t *testing.T) {
	// Not a valid document, but Encode (and so MarshalJSON) must still emit
	// JSON: Go's %q escapes such as \x00 are not JSON.
	d := Document{OnExcess: OnExcess("x\x00\u2028")}
	if !json.Valid(d.Encode()) {
		t.Fatalf("Encode() = %q, want valid JSON", d.Encode())
	}
}

func TestEqual(t *testing.T) {
	rate := func(c int64, u time.Duration, text string) *Rate { return &Rate{Count: c, Unit: u, Text: text} }
	tests := []struct {
		name string
		a, b Document
		want bool
	}{
		{"both empty", Document{}, Document{}, true},
		{"same value, different pointers", Document{MaxPending: i64(3)}, Document{MaxPending: i64(3)}, true},
		{"different value", Document{MaxPending: i64(3)}, Document{MaxPending: i64(4)}, false},
		{"zero is not unset", Document{MaxPending: i64(0)}, Document{}, false},
		{"same field value, different field", Document{MaxPending: i64(3)}, Document{MaxRunning: i64(3)}, false},
		{"explicit reject is not unset", Document{OnExcess: Reject}, Document{}, false},
		{"same rate", Document{EnqueueRate: rate(5, time.Second, "5/s")}, Document{EnqueueRate: rate(5, time.Second, "5/s")}, true},
		{"rate with and without text", Document{EnqueueRate: rate(5, time.Second, "5/s")}, Document{EnqueueRate: rate(5, time.Second, "")}, true},
		{"different counts without text", Document{EnqueueRate: rate(5, time.Second, "")}, Document{EnqueueRate: rate(10, time.Second, "")}, false},
		{"different units without text", Document{EnqueueRate: rate(5, time.Second, "")}, Document{EnqueueRate: rate(5, time.Minute, "")}, false},
		{"rate and no rate", Document{EnqueueRate: rate(5, time.Second, "5/s")}, Document{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Equal(tc.b); got != tc.want {
				t.Fatalf("%s.Equal(%s) = %v, want %v", tc.a.Encode(), tc.b.Encode(), got, tc.want)
			}
			if got := tc.b.Equal(tc.a); got != tc.want {
				t.Fatalf("%s.Equal(%s) = %v, want %v (Equal must be symmetric)", tc.b.Encode(), tc.a.Encode(), got, tc.want)
			}
		})
	}
}

func TestDocumentInsideJSON(t *testing.T) {
	type reply struct {
		Quota    Document `json:"quota"`
		Revision int64    `json:"revision"`
	}
	out, err := json.Marshal(reply{Quota: Document{MaxPending: i64(5)}, Revision: 2})
	if err != nil {
		t.Fatalf("json.Marshal: %v", err)
	}
	if want := `{"quota":{"max_pending":5},"revision":2}`; string(out) != want {
		t.Fatalf("json.Marshal = %s, want %s", out, want)
	}
	out, err = json.Marshal(reply{})
	if err != nil || string(out) != `{"quota":{},"revision":0}` {
		t.Fatalf("json.Marshal(empty) = %s, %v; want {\"quota\":{},\"revision\":0}", out, err)
	}

	var r reply
	if err := json.Unmarshal([]byte(`{"quota":{"max_pending":7,"enqueue_rate":"2/m"},"revision":3}`), &r); err != nil {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	if got, want := string(r.Quota.Encode()), `{"max_pending":7,"enqueue_rate":"2/m"}`; got != want {
		t.Fatalf("unmarshalled quota = %s, want %s", got, want)
	}
	// UnmarshalJSON is as strict as Decode: encoding/json's case-insensitive
	// matching must not take MAX_PENDING.
	err = json.Unmarshal([]byte(`{"quota":{"MAX_PENDING":7}}`), &r)
	if e, ok := api.AsError(err); !ok || e.Code != api.CodeInvalidArgument || e.Reason != api.ReasonInvalidQuota {
		t.Fatalf("json.Unmarshal of MAX_PENDING: got %v, want an INVALID_QUOTA *api.Error", err)
	}
}

func TestMerge(t *testing.T) {
	const base = `{"max_pending":10,"on_excess":"drop","enqueue_rate":"5/s"}`
	tests := []struct {
		name  string
		patch string
		want  string
	}{
		{"empty patch changes nothing", `{}`, base},
		{"replace a field", `{"max_pending":20}`, `{"max_pending":20,"on_excess":"drop","enqueue_rate":"5/s"}`},
		{"replace with zero", `{"max_pending":0}`, `{"max_pending":0,"on_excess":"drop","enqueue_rate":"5/s"}`},
		{"add a field", `{"max_running":1}`, `{"max_pending":10,"on_excess":"drop","enqueue_rate":"5/s","max_running":1}`},
		{"null unsets", `{"max_pending":null}`, `{"on_excess":"drop","enqueue_rate":"5/s"}`},
		{"null unsets a string field", `{"on_excess":null}`, `{"max_pending":10,"enqueue_rate":"5/s"}`},
		{"null unsets the rate", `{"enqueue_rate":null}`, `{"max_pending":10,"on_excess":"drop"}`},
		{"null of an unset field is a no-op", `{"max_dead_rows":null}`, base},
		{"unset everything", `{"max_pending":null,"on_excess":null,"enqueue_rate":null}`, `{}`},
		{"several at once", `{"on_excess":"reject","enqueue_rate":"1/h","max_archived_rows":100,"max_pending":null}`,
			`{"on_excess":"reject","enqueue_rate":"1/h","max_archived_rows":100}`},
		{"same value again", `{"max_pending":10}`, base},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode([]byte(base))
			if err != nil {
				t.Fatalf("Decode(base): %v", err)
			}
			got, err := d.Merge([]byte(tc.patch))
			if err != nil {
				t.Fatalf("Merge(%s): got error %v, want %s", tc.patch, err, tc.want)
			}
			if string(got.Encode()) != tc.want {
				t.Fatalf("Merge(%s) = %s, want %s", tc.patch, got.Encode(), tc.want)
			}
			if string(d.Encode()) != base {
				t.Fatalf("Merge(%s) changed its receiver to %s, want %s", tc.patch, d.Encode(), base)
			}
		})
	}
}

func TestMergeRefuses(t *testing.T) {
	const base = `{"max_pending":10,"on_excess":"drop","enqueue_rate":"5/s"}`
	tests := []struct {
		name    string
		patch   string
		mention string
	}{
		{"negative", `{"max_pending":-1}`, "max_pending"},
		{"wrong type", `{"max_running":"3"}`, "max_running"},
		{"bad rate", `{"enqueue_rate":"5/d"}`, "enqueue_rate"},
		{"bad on_excess", `{"on_excess":"DROP"}`, "on_excess"},
		{"unknown field", `{"max_jobs":1}`, `"max_jobs"`},
		{"upper-case field", `{"MAX_PENDING":1}`, `"MAX_PENDING"`},
		{"unknown field set to null", `{"max_jobs":null}`, `"max_jobs"`},
		{"good fields before a bad one", `{"max_running":1,"max_archived_rows":2,"max_dead_rows":-3}`, "max_dead_rows"},
		{"unset before a bad one", `{"max_pending":null,"on_excess":"never"}`, "on_excess"},
		{"duplicate key", `{"max_pending":1,"max_pending":2}`, "max_pending"},
		{"null patch", `null`, ""},
		{"array patch", `[]`, ""},
		{"string patch", `"x"`, ""},
		{"empty patch", ``, ""},
		{"not JSON", `{"max_pending":`, ""},
		{"trailing data", `{"max_pending":1}}`, "data after the object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode([]byte(base))
			if err != nil {
				t.Fatalf("Decode(base): %v", err)
			}
			got, err := d.Merge([]byte(tc.patch))
			checkQuotaError(t, "Merge("+strconv.Quote(tc.patch)+")", err, tc.mention)
			if string(got.Encode()) != base {
				t.Fatalf("refused Merge(%s) returned %s, want the document unchanged: %s", tc.patch, got.Encode(), base)
			}
			if string(d.Encode()) != base {
				t.Fatalf("refused Merge(%s) changed its receiver to %s", tc.patch, d.Encode())
			}
		})
	}
}

func TestMergeIntoEmptyIsDecode(t *testing.T) {
	for _, in := range []string{`{}`, `{"max_pending":3,"on_excess":"drop"}`, `{"enqueue_rate":"7/m","max_dead_rows":null}`, `{"max_pending":-1}`, `[]`} {
		want, werr := Decode([]byte(in))
		got, gerr := Document{}.Merge([]byte(in))
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("input %s: Decode error %v but Merge error %v; want both or neither", in, werr, gerr)
		}
		if !got.Equal(want) {
			t.Fatalf("input %s: Document{}.Merge = %s, Decode = %s; want equal", in, got.Encode(), want.Encode())
		}
	}
}

func TestKey(t *testing.T) {
	long := strings.Repeat("n", 128)
	tests := []struct {
		ns, key string
	}{
		{"default", "quota:default"},
		{"acme", "quota:ns:4:acme"},
		{"a", "quota:ns:1:a"},
		{"Default", "quota:ns:7:Default"},
		{"default2", "quota:ns:8:default2"},
		{"a:b", "quota:ns:3:a:b"},
		{"ns:4:x", "quota:ns:6:ns:4:x"},
		{"é", "quota:ns:2:é"},           // 2 bytes, 1 rune
		{"日本", "quota:ns:6:日本"},         // 6 bytes, 2 runes
		{"team 🚀", "quota:ns:9:team 🚀"}, // 5 + 4 bytes
		{long, "quota:ns:128:" + long},
	}
	for _, tc := range tests {
		if got := Key(tc.ns); got != tc.key {
			t.Fatalf("Key(%q) = %q, want %q", tc.ns, got, tc.key)
		}
		if !strings.HasPrefix(Key(tc.ns), KeyPrefix) {
			t.Fatalf("Key(%q) = %q does not start with KeyPrefix %q", tc.ns, Key(tc.ns), KeyPrefix)
		}
		ns, ok := NamespaceFromKey(tc.key)
		if !ok || ns != tc.ns {
			t.Fatalf("NamespaceFromKey(%q) = %q, %v; want %q, true", tc.key, ns, ok, tc.ns)
		}
	}
}

func TestNamespaceFromKeyRefuses(t *testing.T) {
	for _, key := range []string{
		"",
		"quota:",
		"quota:Default",
		"quota:default:x",
		"quota:defaultx",
		"settings:quota:default",
		" quota:default",
		"quota:ns:",
		"quota:ns:4",
		"quota:ns:4acme",
		"quota:ns::acme",
		"quota:ns:x:acme",
		"quota:ns:3:acme",
		"quota:ns:5:acme",
		"quota:ns:04:acme", // Key never pads the length
		"quota:ns:+4:acme", // nor signs it
		"quota:ns: 4:acme",
		"quota:ns:-4:acme",
		"quota:ns:0:",        // the empty namespace has no key
		"quota:ns:7:default", // default's key is quota:default
		"quota:ns:1:é",       // the length is in bytes, not runes
		"quota:ns:99999999999999999999:acme",
		"quota:NS:4:acme",
		"quota/ns/4/acme",
	} {
		if ns, ok := NamespaceFromKey(key); ok {
			t.Fatalf("NamespaceFromKey(%q) = %q, true; want false (not a key Key writes)", key, ns)
		}
	}
}

func TestCheckNamespace(t *testing.T) {
	ok := []string{
		"default",
		"acme",
		"a",
		"with space",
		"a:b/c",
		"日本語",
		"🚀",
		strings.Repeat("a", 128),
		strings.Repeat("a", 126) + "é", // 128 bytes
		strings.Repeat("日", 42) + "ab", // 128 bytes
	}
	for _, ns := range ok {
		if err := CheckNamespace(ns); err != nil {
			t.Fatalf("CheckNamespace(%q) (%d bytes) = %v, want nil", ns, len(ns), err)
		}
	}
	bad := []struct{ name, ns string }{
		{"empty", ""},
		{"129 bytes", strings.Repeat("a", 129)},
		{"129 bytes multibyte", strings.Repeat("a", 127) + "é"},
		{"invalid UTF-8", "\xff"},
		{"truncated UTF-8", "ab\xc3"},
		{"surrogate half", "\xed\xa0\x80"},
		{"NUL", "a\x00b"},
		{"newline", "a\nb"},
		{"tab", "\t"},
		{"escape", "a\x1b[0m"},
		{"DEL", "a\x7f"},
		{"C1 control", "a\u0085b"},
		{"C1 control 9F", "\u009f"},
	}
	for _, tc := range bad {
		err := CheckNamespace(tc.ns)
		e, isAPI := api.AsError(err)
		if err == nil || !isAPI || e.Code != api.CodeInvalidArgument {
			t.Fatalf("CheckNamespace(%s %q) = %v, want an INVALID_ARGUMENT *api.Error", tc.name, tc.ns, err)
		}
		if !strings.Contains(e.Message, "namespace") {
			t.Fatalf("CheckNamespace(%s %q): message %q does not name the namespace", tc.name, tc.ns, e.Message)
		}
	}
}

func TestIsField(t *testing.T) {
	for _, f := range Fields {
		if !IsField(f) {
			t.Fatalf("IsField(%q) = false, want true", f)
		}
		if IsField(strings.ToUpper(f)) {
			t.Fatalf("IsField(%q) = true, want false (names are case-sensitive)", strings.ToUpper(f))
		}
	}
	want := []string{"max_pending", "on_excess", "enqueue_rate", "max_running", "max_archived_rows", "max_dead_rows"}
	if strings.Join(Fields, ",") != strings.Join(want, ",") {
		t.Fatalf("Fields = %v, want %v", Fields, want)
	}
}
