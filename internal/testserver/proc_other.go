//go:build !linux

package testserver

import (
	"errors"
	"os/exec"
)

// setServerProc runs cmd as ourselves; running as another user is done on
// Linux only.
func setServerProc(cmd *exec.Cmd, u *osUser, server bool) error {
	if u != nil {
		return errors.New("running a server as user " + u.name + " is supported on Linux only; run the tests as a user other than root")
	}
	return nil
}
