package api

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
	// and periodic schedules (not part of SPEC's contract; nodes only).
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
