package grpcapi

import (
	rpccode "google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexiq/flexiq/api"
)

// Domain is the ErrorInfo domain of FlexiQ's refusals.
const Domain = "flexiq"

// Status renders e as gRPC renders a refusal: the status code named by
// e.Code, e.Message as the message exactly, and a google.rpc.ErrorInfo
// detail with e.Reason (possibly empty, as on every surface) and domain
// "flexiq". It is the gRPC surface's one mapping of api.Error.
func Status(e *api.Error) *status.Status {
	st := status.New(Code(e.Code), e.Message)
	if withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: string(e.Reason), Domain: Domain}); err == nil {
		st = withInfo
	}
	return st
}

// Code is the gRPC code of an api code. api codes are the canonical code
// names of google.rpc.Code, so the name itself is the mapping; a name it
// does not hold is UNKNOWN.
func Code(c api.Code) codes.Code {
	v, ok := rpccode.Code_value[string(c)]
	if !ok {
		return codes.Unknown
	}
	return codes.Code(v)
}

// FromStatus is the api.Error a status carries: the inverse of Status, for
// Go callers of the gRPC surface. A status without FlexiQ's ErrorInfo
// (one from gRPC itself, a proxy's) keeps its code and message and has no
// reason.
func FromStatus(st *status.Status) *api.Error {
	e := &api.Error{Code: codeName(st.Code()), Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == Domain {
			e.Reason = api.Reason(info.GetReason())
		}
	}
	return e
}

// codeName is the canonical name of a gRPC code (codes.Code's String is
// CamelCase).
func codeName(c codes.Code) api.Code {
	if name, ok := rpccode.Code_name[int32(c)]; ok {
		return api.Code(name)
	}
	return api.Code(c.String())
}
