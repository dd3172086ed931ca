package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/flexiq/flexiq/api"
)

// ---------------------------------------------------------------------------
// Triggers

func (a *app) triggerAdd(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	event := f.String("event", "", "event name (required)")
	queue := f.String("queue", "", "queue of the job each event enqueues (required)")
	task := f.String("task", "", "task of that job (required)")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq trigger add: unexpected argument %q", pos[0])
	}
	if *event == "" || *queue == "" || *task == "" {
		return usagef(cmd, "fq trigger add: --event, --queue and --task are required")
	}
	var out api.Trigger
	if _, err := a.admin("POST", "/v1/triggers", api.Trigger{Event: *event, Queue: *queue, Task: *task}, &out); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout, out.ID)
	return nil
}

func (a *app) triggerList(cmd *command, args []string) error {
	asJSON, err := a.noArgs(cmd, args)
	if err != nil {
		return err
	}
	var out struct {
		Triggers []api.Trigger `json:"triggers"`
	}
	data, err := a.admin("GET", "/v1/triggers", nil, &out)
	if err != nil {
		return err
	}
	if asJSON {
		a.printRaw(data)
		return nil
	}
	if len(out.Triggers) == 0 {
		fmt.Fprintln(a.stdout, "no triggers")
		return nil
	}
	rows := [][]string{{"ID", "EVENT", "QUEUE", "TASK"}}
	for _, t := range out.Triggers {
		rows = append(rows, []string{t.ID, t.Event, t.Queue, t.Task})
	}
	printTable(a.stdout, rows)
	return nil
}

func (a *app) triggerRm(cmd *command, args []string) error {
	return a.remove(cmd, args, "trigger", "/v1/triggers/")
}

// remove deletes the one named item at prefix+name.
func (a *app) remove(cmd *command, args []string, what, prefix string) error {
	f := a.newFlags(cmd)
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "fq %s: name exactly one %s", cmd.name, what)
	}
	if _, err := a.admin("DELETE", prefix+pathEscape(pos[0]), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "removed %s %s\n", what, pos[0])
	return nil
}

// noArgs parses a command that takes only --json.
func (a *app) noArgs(cmd *command, args []string) (asJSON bool, err error) {
	f := a.newFlags(cmd)
	j := f.Bool("json", "print the reply as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return false, err
	}
	if len(pos) > 0 {
		return false, usagef(cmd, "fq %s: unexpected argument %q", cmd.name, pos[0])
	}
	return *j, nil
}

// ---------------------------------------------------------------------------
// Periodic jobs

func (a *app) periodicAdd(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	name := f.String("name", "", "schedule name (required)")
	cronSpec := f.String("cron", "", `5-field cron or a descriptor such as "@every 30s" (required)`)
	queue := f.String("queue", "", "queue of the job each fire enqueues (required)")
	task := f.String("task", "", "task of that job (required)")
	payload := f.JSON("payload", "the job's payload, any JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq periodic add: unexpected argument %q", pos[0])
	}
	if *name == "" || *cronSpec == "" || *queue == "" || *task == "" {
		return usagef(cmd, "fq periodic add: --name, --cron, --queue and --task are required")
	}
	p := api.Periodic{Name: *name, Cron: *cronSpec, Queue: *queue, Task: *task, Payload: *payload}
	if _, err := a.admin("POST", "/v1/periodic", p, nil); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "added periodic job %s\n", *name)
	return nil
}

func (a *app) periodicList(cmd *command, args []string) error {
	asJSON, err := a.noArgs(cmd, args)
	if err != nil {
		return err
	}
	var out struct {
		Periodic []api.Periodic `json:"periodic"`
	}
	data, err := a.admin("GET", "/v1/periodic", nil, &out)
	if err != nil {
		return err
	}
	if asJSON {
		a.printRaw(data)
		return nil
	}
	if len(out.Periodic) == 0 {
		fmt.Fprintln(a.stdout, "no periodic jobs")
		return nil
	}
	rows := [][]string{{"NAME", "CRON", "QUEUE", "TASK", "PAYLOAD"}}
	for _, p := range out.Periodic {
		rows = append(rows, []string{p.Name, p.Cron, p.Queue, p.Task, string(p.Payload)})
	}
	printTable(a.stdout, rows)
	return nil
}

func (a *app) periodicRm(cmd *command, args []string) error {
	return a.remove(cmd, args, "periodic job", "/v1/periodic/")
}

// ---------------------------------------------------------------------------
// Queue and task settings: GET the document, change the given fields, PUT.

// settingsKind describes queue or task settings.
type settingsKind struct {
	what   string // "queue"
	path   string // "/v1/queues/"
	list   string // the list reply's field: "queues"
	fields []settingsField
}

type settingsField struct {
	name     string // document field: max_concurrent
	duration bool   // a Go duration, sent as written
	unset    string // how an unset value reads
	help     string
}

var queueKind = settingsKind{what: "queue", path: "/v1/queues/", list: "queues", fields: []settingsField{
	{name: "max_concurrent", unset: "unlimited", help: "jobs of the queue running at once (0 dispatches none)"},
	{name: "max_attempts", unset: fmt.Sprintf("unset (default %d)", api.DefaultMaxAttempts), help: "attempts before a job is dead, unless the job sets its own"},
	{name: "dead_retry_after", duration: true, unset: "unset (no auto-retry)", help: "replay a dead letter once it has been dead this long (e.g. 1h)"},
	{name: "dead_retry_max", unset: "unset", help: "at most this many auto-retry replays per job"},
}}

var taskKind = settingsKind{what: "task", path: "/v1/tasks/", list: "tasks", fields: []settingsField{
	{name: "max_concurrent", unset: "unlimited", help: "jobs of the task running at once (0 dispatches none)"},
}}

func (k settingsKind) fieldNames() []string {
	out := make([]string, len(k.fields))
	for i, f := range k.fields {
		out[i] = f.name
	}
	return out
}

func (a *app) queueSet(cmd *command, args []string) error { return a.settingsSet(cmd, args, queueKind) }
func (a *app) taskSet(cmd *command, args []string) error  { return a.settingsSet(cmd, args, taskKind) }
func (a *app) queueUnset(cmd *command, args []string) error {
	return a.settingsUnset(cmd, args, queueKind)
}
func (a *app) taskUnset(cmd *command, args []string) error {
	return a.settingsUnset(cmd, args, taskKind)
}
func (a *app) queueGet(cmd *command, args []string) error { return a.settingsGet(cmd, args, queueKind) }
func (a *app) taskGet(cmd *command, args []string) error  { return a.settingsGet(cmd, args, taskKind) }
func (a *app) queueList(cmd *command, args []string) error {
	return a.settingsList(cmd, args, queueKind)
}
func (a *app) taskList(cmd *command, args []string) error { return a.settingsList(cmd, args, taskKind) }

func (a *app) settingsSet(cmd *command, args []string, k settingsKind) error {
	f := a.newFlags(cmd)
	ints := map[string]*int64{}
	durs := map[string]*string{}
	for _, fd := range k.fields {
		flagName := strings.ReplaceAll(fd.name, "_", "-")
		if fd.duration {
			_, text := f.Duration(flagName, 0, fd.help)
			durs[flagName] = text
		} else {
			ints[flagName] = f.Int64(flagName, fd.help)
		}
	}
	asJSON := f.Bool("json", "print the resulting document as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "fq %s: name exactly one %s", cmd.name, k.what)
	}
	change := map[string]any{}
	for _, fd := range k.fields {
		flagName := strings.ReplaceAll(fd.name, "_", "-")
		if !f.given(flagName) {
			continue
		}
		if fd.duration {
			change[fd.name] = *durs[flagName]
		} else {
			change[fd.name] = *ints[flagName]
		}
	}
	if len(change) == 0 {
		return usagef(cmd, "fq %s: give at least one setting to change", cmd.name)
	}
	return a.settingsUpdate(k, pos[0], change, *asJSON)
}

func (a *app) settingsUnset(cmd *command, args []string, k settingsKind) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print the resulting document as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef(cmd, "fq %s: name the %s and at least one field (%s)", cmd.name, k.what, strings.Join(k.fieldNames(), ", "))
	}
	change := map[string]any{}
	for _, p := range pos[1:] {
		name, ok := fieldName(p, k.fieldNames())
		if !ok {
			return usagef(cmd, "fq %s: unknown field %q (fields are %s)", cmd.name, p, strings.Join(k.fieldNames(), ", "))
		}
		change[name] = nil
	}
	return a.settingsUpdate(k, pos[0], change, *asJSON)
}

// settingsUpdate merges change (nil values remove a field) into the stored
// document and puts it back.
func (a *app) settingsUpdate(k settingsKind, name string, change map[string]any, asJSON bool) error {
	// Raw values: a number read back keeps every digit.
	cur := map[string]json.RawMessage{}
	if _, err := a.admin("GET", k.path+pathEscape(name), nil, &cur); err != nil {
		return err
	}
	for field, v := range change {
		if v == nil {
			delete(cur, field)
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		cur[field] = raw
	}
	data, err := a.admin("PUT", k.path+pathEscape(name), cur, nil)
	if err != nil {
		return err
	}
	return a.printSettings(k, name, data, asJSON)
}

func (a *app) settingsGet(cmd *command, args []string, k settingsKind) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print the document as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "fq %s: name exactly one %s", cmd.name, k.what)
	}
	data, err := a.admin("GET", k.path+pathEscape(pos[0]), nil, nil)
	if err != nil {
		return err
	}
	return a.printSettings(k, pos[0], data, *asJSON)
}

func (a *app) printSettings(k settingsKind, name string, data []byte, asJSON bool) error {
	if asJSON {
		a.printRaw(data)
		return nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("unexpected %s settings %s: %v", k.what, data, err)
	}
	rows := [][]string{{k.what, name}}
	for _, fd := range k.fields {
		v := fd.unset
		if raw, ok := doc[fd.name]; ok && string(raw) != "null" {
			v = limitText(fd.name, raw)
		}
		rows = append(rows, []string{fd.name, v})
	}
	printTable(a.stdout, rows)
	return nil
}

func (a *app) settingsList(cmd *command, args []string, k settingsKind) error {
	asJSON, err := a.noArgs(cmd, args)
	if err != nil {
		return err
	}
	var out map[string]map[string]json.RawMessage
	data, err := a.admin("GET", strings.TrimSuffix(k.path, "/"), nil, &out)
	if err != nil {
		return err
	}
	if asJSON {
		a.printRaw(data)
		return nil
	}
	items := out[k.list]
	if len(items) == 0 {
		fmt.Fprintf(a.stdout, "no %s settings\n", k.what)
		return nil
	}
	rows := [][]string{{strings.ToUpper(k.what), "SETTINGS"}}
	for _, name := range sortedKeys(items) {
		rows = append(rows, []string{name, string(items[name])})
	}
	printTable(a.stdout, rows)
	return nil
}

// ---------------------------------------------------------------------------
// Tokens

func (a *app) tokenCreate(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	ns := f.String("namespace", "", "the token's namespace (required)")
	role := f.Enum("role", []string{"admin", "producer", "worker"}, "admin, producer or worker (required)")
	asJSON := f.Bool("json", "print the reply as JSON")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq token create: unexpected argument %q", pos[0])
	}
	if !f.given("namespace") || !f.given("role") {
		return usagef(cmd, "fq token create: --namespace and --role are required")
	}
	var out struct {
		ID        string `json:"id"`
		Token     string `json:"token"`
		Namespace string `json:"namespace"`
		Role      string `json:"role"`
	}
	data, err := a.admin("POST", "/v1/tokens", map[string]string{"namespace": *ns, "role": *role}, &out)
	if err != nil {
		return err
	}
	if *asJSON {
		a.printRaw(data)
		return nil
	}
	fmt.Fprintf(a.stdout, "id: %s\ntoken: %s\nnamespace: %s\nrole: %s\n", out.ID, out.Token, out.Namespace, out.Role)
	return nil
}

func (a *app) tokenRevoke(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "fq token revoke: name exactly one token id")
	}
	if _, err := a.admin("DELETE", "/v1/tokens/"+pathEscape(pos[0]), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "revoked token %s\n", pos[0])
	return nil
}

func (a *app) clusterStatus(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print GET /v1/cluster as it is")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq cluster status: unexpected argument %q", pos[0])
	}
	var out struct {
		Node    string `json:"node"`
		Leader  string `json:"leader"`
		Members []struct {
			ID          string `json:"id"`
			Ready       bool   `json:"ready"`
			Owned       int    `json:"owned"`
			Maintenance bool   `json:"maintenance"`
			Partitions  int    `json:"partitions"`
			JobFormat   int    `json:"job_format"`
		} `json:"members"`
		Unreachable []string `json:"unreachable"`
	}
	data, err := a.admin("GET", "/v1/cluster", nil, &out)
	if err != nil {
		return err
	}
	if *asJSON {
		a.printRaw(data)
		return nil
	}
	fmt.Fprintf(a.stdout, "node:   %s\nleader: %s\n", out.Node, orDash(out.Leader))
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tREADY\tPARTITIONS\tNAMESPACES\tMAINTENANCE\tJOB FORMAT")
	for _, m := range out.Members {
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%v\t%d\n", m.ID, m.Ready, m.Partitions, m.Owned, m.Maintenance, m.JobFormat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Unreachable) > 0 {
		fmt.Fprintf(a.stdout, "no route from %s to: %s (calls here for the namespaces they own wait, then fail)\n", out.Node, strings.Join(out.Unreachable, ", "))
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
