package api

import (
	"crypto/sha256"
	"encoding/hex"
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

// Owner subjects (docs/protocol.md "Going straight to the owner"). In a
// cluster one node owns each namespace. The owner names itself in its
// replies (HeaderOwner: the node's OwnerToken); a client may then send its
// calls to SubjectOwner(token, subject), which only that node subscribes
// to, so NATS delivers them there directly instead of to any node that
// would forward them. The token is a hint: a node that takes a call on its
// owner subject for a namespace it does not own (it just moved) forwards it
// like any call, and a client that gets no responders there (the node is
// gone) goes back to the plain subject.
//
// The subject names a node, not a partition, so that a node giving up a
// namespace keeps taking (and forwarding) the calls already on their way
// to it: its callers learn the new owner from the next reply and its
// subject falls quiet before it stops listening. A subject the new owner
// shared would never fall quiet, and a call on its way when the old owner
// stopped listening would be dropped by the servers unanswered.
const (
	// SubjectOwnerPrefix is followed by the owner's token and the request
	// subject's part after "fq.v1.".
	SubjectOwnerPrefix = "fq.v1.o."
	// HeaderOwner, on a reply, is the OwnerToken of the node that answered
	// as the caller's namespace's owner, set by a clustered node.
	HeaderOwner = "Fq-Owner"
	// ownerTokenLen is an owner token's length: 16 lowercase hex digits.
	ownerTokenLen = 16
)

// OwnerToken is node's token in owner subjects: the first 16 hex digits of
// the SHA-256 of its id, so any id is safe in a subject.
func OwnerToken(node string) string {
	h := sha256.Sum256([]byte(node))
	return hex.EncodeToString(h[:ownerTokenLen/2])
}

// ValidOwnerToken says v is an owner token a client may use in a subject.
func ValidOwnerToken(v string) bool {
	if len(v) != ownerTokenLen {
		return false
	}
	for _, c := range v {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SubjectOwner is subject (a request subject) sent straight to the node
// whose OwnerToken is token: fq.v1.o.<token>.<op>.
func SubjectOwner(token, subject string) string {
	return SubjectOwnerPrefix + token + "." + strings.TrimPrefix(subject, "fq.v1.")
}

// OwnerSubjects are the owner forms of the request subjects a client may
// publish to (fq.v1.o.*.enqueue and so on).
var OwnerSubjects = func() []string {
	out := make([]string, len(RequestSubjects))
	for i, s := range RequestSubjects {
		out[i] = SubjectOwnerPrefix + "*." + strings.TrimPrefix(s, "fq.v1.")
	}
	return out
}()

// ParseOwnerSubject splits an owner subject into its token and the request
// subject it stands for; ok is false for anything else.
func ParseOwnerSubject(s string) (token, subject string, ok bool) {
	rest, found := strings.CutPrefix(s, SubjectOwnerPrefix)
	if !found {
		return "", "", false
	}
	token, op, found := strings.Cut(rest, ".")
	if !found || !ValidOwnerToken(token) || op == "" {
		return "", "", false
	}
	return token, "fq.v1." + op, true
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
	return "fq.internal.fwd." + OwnerToken(node)
}

// SubjectInternalOp is where a node takes the calls of other nodes' own
// (admin replay, periodic fires, auto-retry) for the namespaces it owns.
func SubjectInternalOp(node string) string {
	return "fq.internal.op." + OwnerToken(node)
}
