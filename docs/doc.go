// Package docs holds FlexiQ's user documentation, the *.md files next to
// this one: protocol.md (the v1 wire protocol), configuration.md (fq-node's
// flags and environment), and the operations pages. Its test fails when
// the code defines a subject, an error code or reason, or an fq-node flag
// or environment variable that these pages do not mention.
package docs
