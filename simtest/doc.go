// Package simtest is FlexiQ's deterministic simulator.
//
// One seed drives a whole small cluster: a simulated clock, a simulated bus
// (delivery delays, reordering, lost replies and lost fq.v1.quota.changed
// broadcasts), the real SQLite store behind a fault-injecting layer, and the
// real namespace actors (actors.Actor stepped synchronously with Step),
// admission, dispatch and cachebust code. Producers, workers, an admin who
// changes quotas (corrupt documents included) and node restarts act at
// random moments drawn from the seed. Nothing reads the wall clock or global
// randomness, so a seed replays byte for byte.
//
// After every actor step the simulator checks the rules of docs/quotas.md
// and docs/protocol.md against a model it keeps of every job (invariants
// named by the Inv… constants). The model is fed by what the store
// committed (a recording layer right above SQLite) and checked against what
// the actors answered their clients.
//
// The layers around the store, from the actor down:
//
//	actor → [Config.WrapStore] → faultStore → recStore → SQLite
//
// faultStore fails a write before it reaches the store, fails it after it
// committed (the caller sees an error for a write that happened), fails it
// part-way through the transaction (sqlite.Options.Faults), slows it down
// (the simulated clock jumps) or fails a read. recStore sees exactly what
// committed and keeps the model.
//
// Half the seeds (Config.StepTx, the even ones) run each actor step as one
// SQLite transaction, as a node on SQLite does: faultStep and recStep stand
// in for faultStore and recStore, a step's writes reach the model only when
// it commits, the commit itself may fail, and a failed call or commit rolls
// the whole step back. The odd seeds write call by call, as on PostgreSQL
// and Redis, and, as a node there does, all but one in four of them write
// acks beside the actors' next steps (Config.OverlapAcks): the simulator
// holds each such write (actors.Deps.Beside) for zero to two of its
// actor's steps, then lands it before a step or inside one, after the
// step took its messages and before it reads its counts, so its acksDone
// message waits for the step after. An ack answered in a later step is
// judged against the job as the step that took it saw it, and a job whose
// ack is out keeps no lease (its lease ending meanwhile is no violation).
//
// Cluster mode (Config.Cluster, RandomClusterConfig, cluster.go) runs 2–3
// nodes as one cluster on the shared store, as on PostgreSQL or Redis: each
// node has its own cluster.Cluster on the simulated clock over one shared
// ClusterStore model, its actors take their fences from it, and a fence
// layer refuses stale writes (actor → fenceStore → faultStore → recStore).
// Calls reach a random node and are forwarded to the owner; nodes join,
// leave, are killed (their actors step on as stale owners for a while) and
// lose their bus for a while; their clocks may be off the simulation's
// (ClusterConfig.SkewMax), and their calls to the lease store may fail,
// before or after the store acted (ClusterConfig.LeaseFaults). A booting
// node takes partitions only once it reaches every live member on the bus
// (both up, neither cut off), or after ClusterConfig.JoinWait. Its own
// invariants: no write from a stale epoch lands (InvStaleWrite), no call
// is refused for reaching a non-owner (InvRouted), every claimed job
// settles (InvSettled), no two live nodes lead maintenance at once
// (InvOneLeader); the single-node ones hold cluster-wide, counts and
// leases checked on the owner's actor.
//
// Product bugs the simulator found and that are not fixed yet are named by
// the Bug… constants; RandomConfig tolerates them (KnownBugs) so they do not
// hide the next one, and TestKnownBugs shows each still happens.
//
// Tests:
//
//	go test ./simtest                                  # 500 seeds and everything below
//	go test ./simtest -run TestSeeds -seeds=5000 -seedbase=1000 [-simlen=4] [-strict] -v
//	go test ./simtest -run TestSeeds -seed=N -v [-simtrace]   # replay one seed
//	go test ./simtest -run TestScripts [-rewrite]
//	go test ./simtest -run TestClusterSeeds -clusterseeds=1000 [-seedbase=N] -v
//	go test ./simtest -run TestClusterSeeds -clusterseed=N -v [-simtrace]
//
// TestSeeds plays many seeds (each prints the command that replays it when
// it fails; -v also prints what the seeds exercised), TestDeterminism plays
// seeds twice and wants byte-identical traces, the TestMutation… tests break
// one rule each and expect the simulator to name it in both write modes, and
// TestScripts runs the readable scenarios of testdata/*.txt. Under -race
// each seed runs shorter (-simlen 0.3), as SQLite is pure Go and the
// detector slows it some 30×.
package simtest
