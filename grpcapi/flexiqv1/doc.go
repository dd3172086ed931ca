// Package flexiqv1 is the generated Go code of FlexiQ's gRPC protocol,
// proto/flexiq/v1/flexiq.proto: messages, clients and service interfaces.
// Do not edit the .pb.go files; run scripts/protogen.sh (go generate
// ./grpcapi) after changing the .proto. The server is package grpcapi.
package flexiqv1
