package grpcapi

// The generated code in flexiqv1 is checked in; this regenerates it from
// proto/flexiq/v1/flexiq.proto with the pinned generators (and
// flexiqv1's drift test fails until it is regenerated after a change).
//go:generate ../scripts/protogen.sh
