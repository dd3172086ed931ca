package api

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// The v1 subjects. Every request subject is served by every node in queue
// group QueueGroup under the micro service ServiceName.
const (
	ServiceName    = "flexiq"
	ServiceVersion = "1.0.0"
	QueueGroup     = "flexiq"

	SubjectEnqueue    = "fq.v1.enqueue"
	SubjectClaim      = "fq.v1.claim"
	SubjectHeartbeat  = "fq.v1.heartbeat"
	SubjectAck        = "fq.v1.ack"
	SubjectNack       = "fq.v1.nack"
	SubjectEvent      = "fq.v1.event"
	SubjectDeadReplay = "fq.v1.dead.replay"

	// SubjectQuotaChanged is a broadcast (no reply) sent after every quota
	// write, so nodes drop their cached copy at once instead of at TTL.
	SubjectQuotaChanged = "fq.v1.quota.changed"
	// SubjectConfigChanged is the same for queue and task settings, triggers
	// and periodic schedules (nodes only; see docs/protocol.md).
	SubjectConfigChanged = "fq.v1.config.changed"
	// SubjectTokenRevoked tells every node to forget a revoked token at once.
	SubjectTokenRevoked = "fq.v1.token.revoked"

	// HeaderAuthorization carries "Bearer <token>".
	HeaderAuthorization = "Authorization"
	// HeaderErrorCode and HeaderError are the micro error headers: the HTTP
	// status of the code, and the message.
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
)

// The bus's permissions (docs/security.md "Who may use the bus"). A client connects
// with its FlexiQ token as its NATS token and may publish only the request
// subjects (and the $SRV discovery verbs) and subscribe only below its
// private inbox prefix; nodes connect with the cluster secret.
const (
	// InboxPrefixBase is followed by the first 16 hex digits of the
	// SHA-256 of the connection's token.
	InboxPrefixBase = "_INBOX_"
	// SubjectInternal is the nodes' own space (forwarding, membership).
	SubjectInternal = "fq.internal.>"
)

// RequestSubjects are the plain request subjects: any node takes them.
var RequestSubjects = []string{
	SubjectEnqueue, SubjectClaim, SubjectHeartbeat, SubjectAck, SubjectNack, SubjectEvent, SubjectDeadReplay,
}

// Partition subjects (docs/protocol.md "Going straight to the owner"). In a
// cluster every namespace hashes onto a partition and one node owns each.
// The owner names the partition in its replies (HeaderPartition); a client
// may then send its calls to SubjectPartition(p, subject), which only the
// partition's owner subscribes to, so NATS delivers them there directly
// instead of to any node that would forward them. The partition is a hint:
// a node that takes a partition subject for a namespace it does not own
// forwards it like any call, and a client that gets no responders there
// (the partition moved) goes back to the plain subject.
const (
	// SubjectPartitionPrefix is followed by the partition number and the
	// request subject's part after "fq.v1.".
	SubjectPartitionPrefix = "fq.v1.p."
	// HeaderPartition, on a reply, is the partition of the caller's
	// namespace (a decimal number), set by a clustered node.
	HeaderPartition = "Fq-Partition"
	// MaxPartition bounds the partition a client may name.
	MaxPartition = 1023
)

// SubjectPartition is subject (a request subject) sent straight to the
// owner of partition p: fq.v1.p.<p>.<op>.
func SubjectPartition(p int, subject string) string {
	return SubjectPartitionPrefix + strconv.Itoa(p) + "." + strings.TrimPrefix(subject, "fq.v1.")
}

// PartitionSubjects are the partition forms of the request subjects a
// client may publish to (fq.v1.p.*.enqueue and so on).
var PartitionSubjects = func() []string {
	out := make([]string, len(RequestSubjects))
	for i, s := range RequestSubjects {
		out[i] = SubjectPartitionPrefix + "*." + strings.TrimPrefix(s, "fq.v1.")
	}
	return out
}()

// ParsePartitionSubject splits a partition subject into its partition and
// the request subject it stands for; ok is false for anything else.
func ParsePartitionSubject(s string) (p int, subject string, ok bool) {
	rest, found := strings.CutPrefix(s, SubjectPartitionPrefix)
	if !found {
		return 0, "", false
	}
	num, op, found := strings.Cut(rest, ".")
	if !found || num == "" || len(num) > 4 {
		return 0, "", false
	}
	p, err := strconv.Atoi(num)
	if err != nil || p < 0 || p > MaxPartition {
		return 0, "", false
	}
	return p, "fq.v1." + op, true
}

// DiscoverySubjects are the micro discovery verbs a client may publish to
// ($SRV.PING, $SRV.PING.flexiq, $SRV.PING.flexiq.<id>, and INFO, STATS).
var DiscoverySubjects = []string{
	"$SRV.PING", "$SRV.PING.>", "$SRV.INFO", "$SRV.INFO.>", "$SRV.STATS", "$SRV.STATS.>",
}

// InboxPrefix is the private inbox prefix of a connection made with token:
// "_INBOX_" and the first 16 hex digits of SHA-256(token). The client sets
// it as its inbox prefix (nats.go CustomInboxPrefix, nats.js inboxPrefix);
// the server lets it subscribe below it and nowhere else, so no other
// tenant can read its replies.
func InboxPrefix(token string) string {
	h := sha256.Sum256([]byte(token))
	return InboxPrefixBase + hex.EncodeToString(h[:8])
}

// SubjectForward is where a node takes the calls other nodes forward to it
// (docs/cluster.md: the owner of a namespace serves it). The node id is hashed
// into one subject token, so any id is safe in a subject.
func SubjectForward(node string) string {
	h := sha256.Sum256([]byte(node))
	return "fq.internal.fwd." + hex.EncodeToString(h[:8])
}

// SubjectInternalOp is where a node takes the calls of other nodes' own
// (admin replay, periodic fires, auto-retry) for the namespaces it owns.
func SubjectInternalOp(node string) string {
	h := sha256.Sum256([]byte(node))
	return "fq.internal.op." + hex.EncodeToString(h[:8])
}
