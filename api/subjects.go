package api

import (
	"crypto/sha256"
	"encoding/hex"
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

// RequestSubjects are the subjects a client may publish to.
var RequestSubjects = []string{
	SubjectEnqueue, SubjectClaim, SubjectHeartbeat, SubjectAck, SubjectNack, SubjectEvent, SubjectDeadReplay,
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
