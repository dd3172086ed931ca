// Package api is FlexiQ's v1 wire contract: the NATS subjects, the request and
// reply bodies, and the one typed error every surface renders.
//
// It imports nothing of FlexiQ's own, so the Go client, the node and any tool
// can share it without dragging node internals along.
package api
