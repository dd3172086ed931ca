package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/flexiq/flexiq/quota"
)

// quotaReply is GET /v1/quota's body, and with usage GET /v1/usage's.
type quotaReply struct {
	Namespace string          `json:"namespace"`
	Quota     json.RawMessage `json:"quota"`
	Revision  int64           `json:"revision"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error"`
	Usage *struct {
		Pending  int64 `json:"pending"`
		Running  int64 `json:"running"`
		Archived int64 `json:"archived"`
		Dead     int64 `json:"dead"`
	} `json:"usage"`
}

// quotaLimitFlags are the integer limits of quota set: flag → field.
var quotaLimitFlags = []struct{ flag, field, help string }{
	{"max-pending", quota.FieldMaxPending, "pending jobs, delayed ones included"},
	{"max-running", quota.FieldMaxRunning, "jobs running at once"},
	{"max-archived-rows", quota.FieldMaxArchivedRows, "completed jobs kept"},
	{"max-dead-rows", quota.FieldMaxDeadRows, "dead letters kept"},
}

func (a *app) quotaSet(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	limits := map[string]*int64{}
	for _, l := range quotaLimitFlags {
		limits[l.flag] = f.Int64(l.flag, l.help+" (an integer; 0 is a real limit)")
	}
	onExcess := f.Enum("on-excess", []string{string(quota.Reject), string(quota.Drop)}, "what an over-quota enqueue does: reject or drop")
	rate := f.String("enqueue-rate", "", "jobs enqueued per unit of time: <count>/<unit>, unit s, m or h (e.g. 500/s)")
	asJSON := f.Bool("json", "print the reply as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq quota set: unexpected argument %q", pos[0])
	}
	patch := map[string]any{}
	for _, l := range quotaLimitFlags {
		if f.given(l.flag) {
			patch[l.field] = *limits[l.flag]
		}
	}
	if f.given("on-excess") {
		patch[quota.FieldOnExcess] = *onExcess
	}
	if f.given("enqueue-rate") {
		if _, err := quota.ParseRate(*rate); err != nil {
			return usagef(cmd, "%s: must be <count>/<unit> with count >= 1 and unit s, m or h (e.g. 500/s), got %q",
				written(a.args, "enqueue-rate"), *rate)
		}
		patch[quota.FieldEnqueueRate] = *rate
	}
	if len(patch) == 0 {
		return usagef(cmd, "fq quota set: give at least one limit to set (use fq quota unset to remove one, fq quota clear to remove all)")
	}
	return a.quotaWrite("PATCH", patch, *asJSON)
}

// fieldName accepts a quota field as max_pending or max-pending.
func fieldName(s string, fields []string) (string, bool) {
	name := strings.ReplaceAll(s, "-", "_")
	for _, f := range fields {
		if f == name {
			return f, true
		}
	}
	return "", false
}

func (a *app) quotaUnset(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print the reply as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef(cmd, "fq quota unset: name at least one field (%s)", strings.Join(quota.Fields, ", "))
	}
	patch := map[string]any{}
	for _, p := range pos {
		name, ok := fieldName(p, quota.Fields)
		if !ok {
			return usagef(cmd, "fq quota unset: unknown field %q (fields are %s)", p, strings.Join(quota.Fields, ", "))
		}
		patch[name] = nil
	}
	return a.quotaWrite("PATCH", patch, *asJSON)
}

func (a *app) quotaClear(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print the reply as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq quota clear: unexpected argument %q", pos[0])
	}
	return a.quotaWrite("DELETE", nil, *asJSON)
}

func (a *app) quotaWrite(method string, body any, asJSON bool) error {
	var out quotaReply
	data, err := a.admin(method, "/v1/quota", body, &out)
	if err != nil {
		return err
	}
	if asJSON {
		a.printRaw(data)
		return nil
	}
	a.printQuota(out)
	return nil
}

func (a *app) quotaGet(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print GET /v1/usage's object as is")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq quota get: unexpected argument %q", pos[0])
	}
	var out quotaReply
	data, err := a.admin("GET", "/v1/usage", nil, &out)
	if err != nil {
		return err
	}
	if *asJSON {
		a.printRaw(data)
		return nil
	}
	a.printQuota(out)
	return nil
}

// printQuota prints the document as a table: each field's limit, and with
// usage the count it bounds beside it.
func (a *app) printQuota(q quotaReply) {
	fmt.Fprintf(a.stdout, "namespace: %s\nrevision:  %d\n", q.Namespace, q.Revision)
	// A stored document that cannot be read is shown as stored, with why.
	var doc map[string]json.RawMessage
	if json.Unmarshal(q.Quota, &doc) != nil {
		fmt.Fprintf(a.stdout, "stored:    %s\n", q.Quota)
	}
	if q.Error != nil {
		// Fail closed: nothing of the namespace runs while the document is
		// unreadable, whatever the fields that did decode say.
		fmt.Fprintf(a.stdout, "error:     %s\n", q.Error.Message)
		fmt.Fprintf(a.stdout, "state:     stopped: enqueues and claims are refused until the document is fixed or cleared\n")
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if q.Usage != nil {
		fmt.Fprintln(tw, "FIELD\tLIMIT\tUSAGE")
	} else {
		fmt.Fprintln(tw, "FIELD\tLIMIT")
	}
	for _, field := range quota.Fields {
		limit := limitText(field, doc[field])
		if doc == nil && q.Error != nil {
			limit = "unreadable"
		}
		if q.Usage == nil {
			fmt.Fprintf(tw, "%s\t%s\n", field, limit)
			continue
		}
		used := "-"
		switch field {
		case quota.FieldMaxPending:
			used = fmt.Sprint(q.Usage.Pending)
		case quota.FieldMaxRunning:
			used = fmt.Sprint(q.Usage.Running)
		case quota.FieldMaxArchivedRows:
			used = fmt.Sprint(q.Usage.Archived)
		case quota.FieldMaxDeadRows:
			used = fmt.Sprint(q.Usage.Dead)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", field, limit, used)
	}
	tw.Flush()
}

// limitText is a field's value for people: unset is unlimited (reject for
// on_excess), strings without quotes.
func limitText(field string, raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		if field == quota.FieldOnExcess {
			return "reject (default)"
		}
		return "unlimited"
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// printTable writes rows (the first is the header) aligned.
func printTable(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}
