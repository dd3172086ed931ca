package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	gojson "github.com/goccy/go-json"
)

// Code is a gRPC canonical code name. Using the gRPC names on every surface
// lets a NATS client, an HTTP client and a gRPC client compare the same string.
type Code string

// The codes FlexiQ uses.
const (
	CodeInvalidArgument    Code = "INVALID_ARGUMENT"
	CodeFailedPrecondition Code = "FAILED_PRECONDITION"
	CodeUnauthenticated    Code = "UNAUTHENTICATED"
	CodePermissionDenied   Code = "PERMISSION_DENIED"
	CodeNotFound           Code = "NOT_FOUND"
	CodeAlreadyExists      Code = "ALREADY_EXISTS"
	CodeAborted            Code = "ABORTED"
	CodeResourceExhausted  Code = "RESOURCE_EXHAUSTED"
	CodeInternal           Code = "INTERNAL"
	CodeUnavailable        Code = "UNAVAILABLE"
)

// Reason refines a code into the situation a client can act on.
type Reason string

// The reasons of docs/protocol.md ("Errors"). The empty reason is valid.
const (
	ReasonQueueFull       Reason = "QUEUE_FULL"
	ReasonRateLimited     Reason = "RATE_LIMITED"
	ReasonQuotaUnreadable Reason = "QUOTA_UNREADABLE"
	ReasonInvalidQuota    Reason = "INVALID_QUOTA"
	ReasonBadRequest      Reason = "BAD_REQUEST"
	ReasonUnknownJob      Reason = "UNKNOWN_JOB"
	ReasonLeaseLost       Reason = "LEASE_LOST"
)

// Error is the one error type of the API. It is created where a rule lives
// and rendered unchanged by every surface, so all clients see the same code,
// reason and message for the same situation. Reason is always rendered,
// "" when none applies (docs/protocol.md: "always present").
type Error struct {
	Code    Code   `json:"code"`
	Reason  Reason `json:"reason"`
	Message string `json:"message"`
}

// Error returns the message alone: it is what the CLI prints and what the
// Nats-Service-Error header carries.
func (e *Error) Error() string { return e.Message }

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, reason Reason, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Unauthenticated is the refusal of a missing, unknown or revoked token,
// the same on every surface: a request's Authorization header, and a NATS
// connection the bus refused.
func Unauthenticated() *Error {
	return &Error{Code: CodeUnauthenticated, Message: "missing or invalid token: send Authorization: Bearer <token>"}
}

// LeaseLost is the error of an ack or nack from a worker whose lease on
// the job is gone, and the cause a worker's handler sees when a heartbeat
// finds it so.
func LeaseLost(id string) *Error {
	return Errorf(CodeAborted, ReasonLeaseLost, "job '%s' is not running under this lease", id)
}

// AsError finds an *Error in err's chain.
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// FromError turns any error into an *Error. An error with no *Error in its
// chain is INTERNAL: its text may name internals, so the message is generic.
func FromError(err error) *Error {
	if err == nil {
		return nil
	}
	if e, ok := AsError(err); ok {
		return e
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}

// HTTPStatus maps a code to the HTTP status of docs/protocol.md.
func HTTPStatus(c Code) int {
	switch c {
	case CodeInvalidArgument, CodeFailedPrecondition:
		return http.StatusBadRequest
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeAlreadyExists, CodeAborted:
		return http.StatusConflict
	case CodeResourceExhausted:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// CodeForHTTPStatus is HTTPStatus's inverse for clients that only see a
// status (a NATS reply whose body was lost, say). 400 is ambiguous and maps
// to INVALID_ARGUMENT.
func CodeForHTTPStatus(status int) Code {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeAborted
	case http.StatusTooManyRequests:
		return CodeResourceExhausted
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	default:
		return CodeInternal
	}
}

// ErrorBody is the JSON body of every failed request: {"error":{…}}.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// BadRequest is INVALID_ARGUMENT with reason BAD_REQUEST: a body that is not
// JSON or does not have the request's shape.
func BadRequest(format string, args ...any) *Error {
	return Errorf(CodeInvalidArgument, ReasonBadRequest, format, args...)
}

// InvalidArgument is INVALID_ARGUMENT with no reason: a well-formed request
// with a field out of range.
func InvalidArgument(format string, args ...any) *Error {
	return Errorf(CodeInvalidArgument, "", format, args...)
}

// Marshal encodes v as JSON without HTML escaping, so messages such as
// "pending >= max_pending" travel as written on every surface. The node's
// replies go through it on their namespace's actor, so it is the fast
// encoder (github.com/goccy/go-json); when that refuses v, encoding/json
// encodes it again, so the error is encoding/json's
// (TestMarshalFastAgreesWithEncodingJSON checks the bytes are the same).
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	fast := gojson.NewEncoder(&b)
	fast.SetEscapeHTML(false)
	if fast.Encode(v) == nil {
		return bytes.TrimRight(b.Bytes(), "\n"), nil
	}
	b.Reset()
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
