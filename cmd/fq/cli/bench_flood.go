package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/quota"
)

// floodSynopsis is fq bench flood's usage line (fq bench's own lists the
// other modes).
const floodSynopsis = "[--flood-token T] [--jobs N | --duration D] [--rate N] [--rounds N] [--producers N] [--workers N]\n" +
	"                [--flood-rate N/s|m|h] [--flood-factor N] [--flood-max-pending N] [--flood-producers N] [--queue Q] [--payload JSON] [--no-drain]\n" +
	"  namespace B's (--token) enqueue and claim+ack latency alone, then while namespace A (--flood-token)\n" +
	"  sits at max_pending and offers --flood-factor times its enqueue_rate; without --flood-token,\n" +
	"  --token must be the root token and fq creates both namespaces"

// floodCommand is fq bench flood as a command of its own, so its usage
// errors and --help show its flags.
var floodCommand = &command{name: "bench flood", synopsis: floodSynopsis}

// floodFlags are the flags only fq bench flood takes.
type floodFlags struct {
	token      *string
	rate       *int
	floodRate  *string
	factor     *int
	maxPending *int64
	producers  *int
	rounds     *int
}

func (a *app) newFloodFlags(f *flags) floodFlags {
	d := DefaultFloodConfig()
	return floodFlags{
		token:      f.String("flood-token", "", "flood: admin token of namespace A, the flooder (default: --token must be root, and fq creates A and B)"),
		rate:       f.PosInt("rate", d.Rate, fmt.Sprintf("flood: namespace B's single-job enqueues per second, and as many claim+acks (default %d, at most %d)", d.Rate, MaxFloodRate)),
		floodRate:  f.String("flood-rate", d.FloodRate.String(), fmt.Sprintf("flood: namespace A's enqueue_rate during the run, <count>/<unit> (default %s)", d.FloodRate)),
		factor:     f.PosInt("flood-factor", d.FloodFactor, fmt.Sprintf("flood: A offers this many times its enqueue_rate (default %d, at most %d)", d.FloodFactor, MaxFloodFactor)),
		maxPending: f.Int64("flood-max-pending", fmt.Sprintf("flood: namespace A's max_pending during the run, which A is filled to (default %d, 0 to %d)", d.FloodMaxPending, MaxFloodPending)),
		producers:  f.PosInt("flood-producers", d.FloodProducers, fmt.Sprintf("flood: namespace A's producers (default %d, at most %d)", d.FloodProducers, MaxFloodGoroutine)),
		rounds:     f.PosInt("rounds", d.Rounds, fmt.Sprintf("flood: alternate alone and flooded this many times, each with a share of --jobs (default %d, at most %d)", d.Rounds, MaxFloodRounds)),
	}
}

// floodOnly are the flags no other mode takes.
var floodOnly = []string{"flood-token", "rate", "rounds", "flood-rate", "flood-factor", "flood-max-pending", "flood-producers"}

// benchFlood is fq bench flood: the flags are parsed, the values checked
// against FloodConfig's bounds, then the two namespaces found (or made),
// MeasureFlood run, the result printed, and the namespaces put back.
func (a *app) benchFlood(cmd *command, f *flags, ff floodFlags, common benchConfig, noDrain bool) (err error) {
	for _, name := range []string{"batch", "sdk-worker"} {
		if f.given(name) {
			return usagef(cmd, "%s: fq bench flood does not take it", written(a.args, name))
		}
	}
	cfg := DefaultFloodConfig()
	cfg.Rate = *ff.rate
	cfg.FloodFactor = *ff.factor
	cfg.FloodProducers = *ff.producers
	cfg.Rounds = *ff.rounds
	if f.given("flood-max-pending") {
		cfg.FloodMaxPending = *ff.maxPending
	}
	if f.given("producers") {
		cfg.Producers = common.producers
	}
	if f.given("workers") {
		cfg.Workers = common.workers
	}
	if len(common.payload) > 0 {
		cfg.Payload = common.payload
	}
	cfg.Queue = common.queue
	r, rerr := quota.ParseRate(*ff.floodRate)
	if rerr != nil {
		return usagef(cmd, "%s: must be <count>/<unit> with count >= 1 and unit s, m or h (e.g. 500/s), got %q", written(a.args, "flood-rate"), *ff.floodRate)
	}
	cfg.FloodRate = r
	switch {
	case f.given("jobs"):
		cfg.Jobs = common.jobs
	case f.given("duration"):
		jobs := common.duration.Seconds() * float64(cfg.Rate)
		if jobs < 1 || jobs > MaxFloodJobs {
			return usagef(cmd, "%s: a phase must be 1 to %d jobs at --rate %d, got %s (%.0f jobs)", written(a.args, "duration"), MaxFloodJobs, cfg.Rate, common.duration, jobs)
		}
		cfg.Jobs = int(jobs)
	}
	if f.given("flood-token") && strings.TrimSpace(*ff.token) == "" {
		return usagef(cmd, "%s: must not be empty", written(a.args, "flood-token"))
	}
	cfg.SetFloodQuota = func(context.Context, map[string]any) error { return nil } // checked below, replaced once A is known
	var be floodBoundError
	if cerr := cfg.Check(); errors.As(cerr, &be) {
		return usagef(cmd, "%s: %s", written(a.args, be.flag), be.msg)
	} else if cerr != nil {
		return cerr
	}

	bApp := a
	var aApp *app
	var nsA, nsB string
	// quotaWritten: A's quota was patched, so it must be put back.
	quotaWritten := false
	if f.given("flood-token") {
		aApp = a.as(strings.TrimSpace(*ff.token))
		var qa, qb quotaReply
		if _, err := aApp.admin("GET", "/v1/quota", nil, &qa); err != nil {
			if denied(err) {
				fmt.Fprintf(a.stderr, "fq bench flood: %s must be an admin token (of namespace A):\n", written(a.args, "flood-token"))
			}
			return err
		}
		if _, err := bApp.admin("GET", "/v1/quota", nil, &qb); err != nil {
			if denied(err) {
				fmt.Fprintf(a.stderr, "fq bench flood: %s must be an admin token (of namespace B):\n", a.source(&a.token))
			}
			return err
		}
		if qa.Namespace == qb.Namespace {
			return usagef(cmd, "%s: namespace A must not be namespace B (both are %q): give admin tokens of two namespaces", written(a.args, "flood-token"), qa.Namespace)
		}
		nsA, nsB = qa.Namespace, qb.Namespace
		// A's quota is changed for the run: put the document back after.
		defer func() {
			if !quotaWritten {
				return
			}
			if _, rerr := aApp.admin("PUT", "/v1/quota", []byte(qa.Quota), nil); rerr != nil {
				fmt.Fprintf(a.stderr, "fq bench flood: could not put namespace %s's quota back to %s: %v\n", nsA, qa.Quota, rerr)
				if err == nil {
					err = rerr
				}
			}
		}()
	} else {
		stamp := time.Now().UnixMilli()
		nsA, nsB = fmt.Sprintf("bench-flood-a-%d", stamp), fmt.Sprintf("bench-flood-b-%d", stamp)
		var toks [2]struct {
			ID    string `json:"id"`
			Token string `json:"token"`
		}
		for i, ns := range []string{nsA, nsB} {
			if _, err := a.admin("POST", "/v1/tokens", map[string]string{"namespace": ns, "role": "admin"}, &toks[i]); err != nil {
				if denied(err) {
					fmt.Fprintf(a.stderr, "fq bench flood: without --flood-token, %s must be the root token, to create namespaces A and B (or give --flood-token and --token, admin tokens of two namespaces):\n", a.source(&a.token))
				}
				return err
			}
			// The tokens were made for this run only.
			defer func(id string) {
				if _, rerr := a.admin("DELETE", "/v1/tokens/"+pathEscape(id), nil, nil); rerr != nil {
					fmt.Fprintf(a.stderr, "fq bench flood: could not revoke the token %s made for the run: %v\n", id, rerr)
					if err == nil {
						err = rerr
					}
				}
			}(toks[i].ID)
		}
		aApp, bApp = a.as(toks[0].Token), a.as(toks[1].Token)
	}
	cfg.SetFloodQuota = func(_ context.Context, patch map[string]any) error {
		quotaWritten = true // even a failed write may have landed
		_, err := aApp.admin("PATCH", "/v1/quota", patch, nil)
		return err
	}

	cA, err := aApp.connect()
	if err != nil {
		return err
	}
	defer cA.Close()
	cB, err := bApp.connect()
	if err != nil {
		return err
	}
	defer cB.Close()

	fmt.Fprintf(a.stdout, "bench flood: queue %s in both namespaces, %d jobs a phase, alone then flooded %d times\n", cfg.Queue, cfg.Jobs, cfg.Rounds)
	fmt.Fprintf(a.stdout, "  B %s: %d single-job enqueues/s (%d producers) and %d claim+acks/s (%d workers)\n", nsB, cfg.Rate, cfg.Producers, cfg.Rate, cfg.Workers)
	fmt.Fprintf(a.stdout, "  A %s: max_pending %d, enqueue_rate %s, flooded at %.0f calls/s (%d×) by %d producers\n",
		nsA, cfg.FloodMaxPending, cfg.FloodRate, cfg.Offered(), cfg.FloodFactor, cfg.FloodProducers)
	cfg.Progress = func(format string, args ...any) { fmt.Fprintf(a.stdout, "("+format+")\n", args...) }
	res, err := MeasureFlood(a.ctx, cB, cA, cfg)
	if err != nil {
		// The node's refusal is printed as it sent it; say first whose
		// call it refused (both namespaces use the same queue name).
		if e, ok := api.AsError(err); ok {
			if what := strings.TrimSuffix(err.Error(), ": "+e.Error()); what != err.Error() {
				fmt.Fprintf(a.stderr, "fq %s:\n", what)
			}
		}
		fmt.Fprintf(a.stdout, "(jobs may be left pending in queue %s of %s and %s)\n", cfg.Queue, nsA, nsB)
		return err
	}
	a.printFlood(res)

	if noDrain {
		fmt.Fprintf(a.stdout, "(%d jobs left pending in queue %s of %s, %d in %s's: --no-drain)\n", res.LeftB, cfg.Queue, nsB, res.LeftA, nsA)
		return nil
	}
	start := time.Now()
	drain := benchConfig{queue: cfg.Queue, workers: min(cfg.Workers, 8)}
	for _, d := range []struct {
		c    *client.Client
		left int64
	}{{cB, res.LeftB}, {cA, res.LeftA}} {
		if d.left > 0 {
			if _, err := a.workPhase(d.c, drain, "drain", d.left, 100, 0); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(a.stdout, "(drained %d jobs of B and %d of A in %.2fs; --no-drain keeps them)\n", res.LeftB, res.LeftA, time.Since(start).Seconds())
	return nil
}

// denied reports whether the node refused err's call for its token.
func denied(err error) bool {
	e, ok := api.AsError(err)
	return ok && (e.Code == api.CodePermissionDenied || e.Code == api.CodeUnauthenticated)
}

// as is a copy of the app that acts with token.
func (a *app) as(token string) *app {
	b := *a
	b.tokenDone, b.tokenVal, b.noToken = true, token, false
	return &b
}

func (a *app) printFlood(r FloodResult) {
	al, fl := r.Alone, r.Flooded
	row := func(name string, x, y time.Duration) []string {
		return []string{name, latText(x), latText(y), ratioText(ratio(y, x))}
	}
	perSec := func(name string, x, y float64) []string {
		return []string{name, fmt.Sprintf("%.0f", x), fmt.Sprintf("%.0f", y)}
	}
	printTable(a.stdout, [][]string{
		{"B", "alone", "flooded", "flooded/alone"},
		row("enqueue p50", al.Enqueue.P50, fl.Enqueue.P50),
		row("enqueue p99", al.Enqueue.P99, fl.Enqueue.P99),
		row("enqueue max", al.Enqueue.Max, fl.Enqueue.Max),
		perSec("enqueue jobs/s", al.Enqueue.PerSecond, fl.Enqueue.PerSecond),
		row("claim+ack p50", al.Claim.P50, fl.Claim.P50),
		row("claim+ack p99", al.Claim.P99, fl.Claim.P99),
		row("claim+ack max", al.Claim.Max, fl.Claim.Max),
		perSec("claim+ack jobs/s", al.Claim.PerSecond, fl.Claim.PerSecond),
	})
	fmt.Fprintf(a.stdout, "A while flooded: %d calls (%.0f/s): %d QUEUE_FULL, %d RATE_LIMITED, %d accepted\n",
		fl.FloodCalls, fl.FloodPerSecond, fl.FloodQueueFull, fl.FloodRateLimited, fl.FloodAccepted)
	fmt.Fprintf(a.stdout, "B's p99 flooded/alone: enqueue %s, claim+ack %s (isolation target: 1.20 or less)\n",
		ratioText(r.EnqueueRatio()), ratioText(r.ClaimRatio()))
	if len(r.Rounds) > 1 {
		var enq, claim []string
		for _, x := range r.Rounds {
			enq, claim = append(enq, ratioText(x.Enqueue)), append(claim, ratioText(x.Claim))
		}
		m := r.MedianRatio()
		fmt.Fprintf(a.stdout, "  per round: enqueue %s (median %s); claim+ack %s (median %s)\n",
			strings.Join(enq, " "), ratioText(m.Enqueue), strings.Join(claim, " "), ratioText(m.Claim))
	}
}

func ratioText(x float64) string {
	if x <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}
