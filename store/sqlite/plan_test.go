package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// TestListPlans checks the index each listing of a namespace's jobs walks.
// A listing that sorts, or walks an index that does not narrow it to what
// it asks for, reads the namespace's whole history for one page: with a
// million archived jobs a page of GET /v1/jobs would take seconds, and so
// would an actor reloading its running jobs.
func TestListPlans(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "flexiq.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	yes := true
	for _, c := range []struct {
		name  string
		p     *store.JobListParams // nil: query and args below
		query string
		args  []any
		index string
		sort  bool // a temporary b-tree for ORDER BY is expected
	}{
		{name: "list", p: &store.JobListParams{Limit: 100}, index: "jobs_ns_seq"},
		{name: "list page", p: &store.JobListParams{Limit: 100, BeforeSeq: 5000}, index: "jobs_ns_seq"},
		{name: "list completed", p: &store.JobListParams{Status: api.StatusCompleted, Limit: 100}, index: "jobs_ns_seq"},
		{name: "list pending of a queue", p: &store.JobListParams{Status: api.StatusPending, Queue: "q", Limit: 100}, index: "jobs_ns_seq"},
		{name: "list shed dead letters", p: &store.JobListParams{Status: api.StatusDead, Shed: &yes, Limit: 100}, index: "jobs_ns_seq"},
		// Running jobs are few: reading them all and sorting beats walking
		// the namespace's history to find them.
		{name: "list running", p: &store.JobListParams{Status: api.StatusRunning, Limit: 100}, index: "jobs_running", sort: true},
		{name: "actor load: running jobs", query: listRunningSQL, args: []any{"acme"}, index: "jobs_running", sort: true},
		{name: "dead letters due a retry", query: deadRetryableSQL, args: []any{"acme", "q", 1, 3, 10}, index: "jobs_ns_finished"},
	} {
		query, args := c.query, c.args
		if c.p != nil {
			c.p.Namespace = "acme"
			if query, args, err = listSQL(*c.p); err != nil {
				t.Fatal(err)
			}
		}
		plan := explain(t, s, query, args)
		if !strings.Contains(plan, "INDEX "+c.index+" ") {
			t.Errorf("%s: plan does not walk %s:\n%s", c.name, c.index, plan)
		}
		if got := strings.Contains(plan, "TEMP B-TREE"); got != c.sort {
			t.Errorf("%s: sorts = %v, want %v:\n%s", c.name, got, c.sort, plan)
		}
	}
}

func explain(t *testing.T, s *Store, query string, args []any) string {
	t.Helper()
	rows, err := s.r.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// TestClaimHeadPlan checks that the one-statement claim walks the head of
// the queue's claim index and finds each job it marks by its key: a scan
// of jobs would read the namespace's history for every claim.
func TestClaimHeadPlan(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "flexiq.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name, query string
		args        []any
	}{
		{"one lease and worker", claimHeadSameSQL, []any{"acme", "q", 1, "w", 32}},
		{"a lease and worker a slot", claimHeadSlotsSQL, []any{"acme", "q", `[[1,"w"]]`}},
	} {
		plan := explain(t, s, fmt.Sprintf(c.query, 32), c.args)
		if !strings.Contains(plan, "INDEX jobs_claim ") || !strings.Contains(plan, "INTEGER PRIMARY KEY (rowid=?)") {
			t.Errorf("%s: plan does not walk jobs_claim and look jobs up by key:\n%s", c.name, plan)
		}
		for _, line := range strings.Split(plan, "\n") {
			if strings.HasPrefix(line, "SCAN jobs") || strings.HasPrefix(line, "SCAN s VIRTUAL TABLE") {
				t.Errorf("%s: plan scans jobs, or reads the slots' JSON for each job:\n%s", c.name, plan)
			}
		}
		t.Logf("%s:\n%s", c.name, plan)
	}
}
