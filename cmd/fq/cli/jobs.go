package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/flexiq/flexiq/api"
)

func (a *app) enqueue(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	queue := f.String("queue", "", "queue (required)")
	task := f.String("task", "", "task (required)")
	payload := f.JSON("payload", "the job's payload, any JSON")
	delay, _ := f.Duration("delay", 0, "run the job this much later (e.g. 30s, 1h)")
	uniqueKey := f.String("unique-key", "", "at most one live job holds this key")
	count := f.PosInt("count", 1, "enqueue this many jobs in one call, admitted or refused as a unit (default 1)")
	id := f.String("id", "", "the job's id (default: generated)")
	priority := f.Int64("priority", "higher runs first")
	maxAttempts := f.Int64("max-attempts", "attempts before the job is dead (default: the queue's, else 20)")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq enqueue: unexpected argument %q", pos[0])
	}
	if *queue == "" || *task == "" {
		return usagef(cmd, "fq enqueue: --queue and --task are required")
	}
	job := api.Job{
		ID: *id, Queue: *queue, Task: *task, Payload: *payload, Priority: *priority,
		DelayMS: delay.Milliseconds(), UniqueKey: *uniqueKey,
	}
	if f.given("max-attempts") {
		job.MaxAttempts = maxAttempts
	}
	jobs := make([]api.Job, *count)
	for i := range jobs {
		jobs[i] = job
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.EnqueueMany(a.ctx, jobs)
	if err != nil {
		return err
	}
	a.printResults(res)
	return nil
}

// printResults prints one line per job: its id and outcome.
func (a *app) printResults(res []api.EnqueueResult) {
	for _, r := range res {
		fmt.Fprintf(a.stdout, "%s %s\n", r.ID, r.Outcome)
	}
}

func (a *app) jobShow(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	asJSON := f.Bool("json", "print the job object as is")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "fq %s: name exactly one job id", cmd.name)
	}
	var j api.Job
	data, err := a.admin("GET", "/v1/jobs/"+pathEscape(pos[0]), nil, &j)
	if err != nil {
		return err
	}
	if *asJSON {
		a.printRaw(data)
		return nil
	}
	a.printJob(j)
	return nil
}

func (a *app) printJob(j api.Job) {
	rows := [][]string{
		{"id", j.ID},
		{"queue", j.Queue},
		{"task", j.Task},
		{"status", string(j.Status)},
	}
	attempt := strconv.FormatInt(j.Attempt, 10)
	if j.MaxAttempts != nil {
		attempt += " of " + strconv.FormatInt(*j.MaxAttempts, 10)
	}
	rows = append(rows, []string{"attempt", attempt}, []string{"priority", strconv.FormatInt(j.Priority, 10)})
	add := func(k, v string) {
		if v != "" && v != "null" {
			rows = append(rows, []string{k, v})
		}
	}
	add("payload", string(j.Payload))
	add("unique_key", j.UniqueKey)
	if j.Debounce != nil {
		add("debounce", fmt.Sprintf("key %s, window %s", j.Debounce.Key, time.Duration(j.Debounce.WindowMS)*time.Millisecond))
	}
	add("run_at", timeText(j.RunAt))
	add("lease_until", timeText(j.LeaseUntil))
	add("created_at", timeText(j.CreatedAt))
	add("finished_at", timeText(j.FinishedAt))
	add("error", j.Error)
	add("dead_meta", string(j.DeadMeta))
	add("result", string(j.Result))
	printTable(a.stdout, rows)
}

func timeText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.Format(time.RFC3339Nano)
}

func (a *app) deadList(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	queue := f.String("queue", "", "only this queue's dead letters")
	shed := f.Bool("shed", "only jobs shed by the quota (drop mode)")
	limit := f.PosInt("limit", 100, "at most this many, newest first (default 100)")
	asJSON := f.Bool("json", `print {"jobs":[…]} as is`)
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "fq dead list: unexpected argument %q", pos[0])
	}
	q := url.Values{"status": {"dead"}, "limit": {strconv.Itoa(*limit)}}
	if *queue != "" {
		q.Set("queue", *queue)
	}
	if *shed {
		q.Set("shed", "true")
	}
	var out struct {
		Jobs []api.Job `json:"jobs"`
	}
	data, err := a.admin("GET", "/v1/jobs?"+q.Encode(), nil, &out)
	if err != nil {
		return err
	}
	if *asJSON {
		a.printRaw(data)
		return nil
	}
	if len(out.Jobs) == 0 {
		fmt.Fprintln(a.stdout, "no dead letters")
		return nil
	}
	rows := [][]string{{"ID", "QUEUE", "TASK", "ATTEMPT", "FINISHED", "ERROR"}}
	for _, j := range out.Jobs {
		rows = append(rows, []string{j.ID, j.Queue, j.Task, strconv.FormatInt(j.Attempt, 10), timeText(j.FinishedAt), j.Error})
	}
	printTable(a.stdout, rows)
	return nil
}

func (a *app) deadReplay(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef(cmd, "fq dead replay: name at least one dead letter")
	}
	var out api.EnqueueReply
	if _, err := a.admin("POST", "/v1/dead/replay", api.ReplayRequest{IDs: pos}, &out); err != nil {
		return err
	}
	a.printResults(out.Results)
	return nil
}

func (a *app) eventPublish(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	payload := f.JSON("payload", "the event's payload, any JSON (each job carries it)")
	pos, err := f.parse(args, true)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef(cmd, "fq event publish: name exactly one event")
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.PublishEvent(a.ctx, pos[0], *payload)
	if err != nil {
		return err
	}
	if len(res) == 0 {
		fmt.Fprintf(a.stderr, "fq: no trigger matches event %q: nothing enqueued\n", pos[0])
	}
	a.printResults(res)
	return nil
}

// jsonString renders s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
