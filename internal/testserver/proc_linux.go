package testserver

import (
	"os/exec"
	"syscall"
)

// setServerProc runs cmd as u (nil: as ourselves) in a process group of its
// own. A long-lived server also gets the parent-death signal (SIGQUIT: a
// PostgreSQL immediate shutdown), so it never outlives the test binary.
func setServerProc(cmd *exec.Cmd, u *osUser, server bool) error {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u != nil {
		attr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid}
	}
	if server {
		attr.Pdeathsig = syscall.SIGQUIT
	}
	cmd.SysProcAttr = attr
	return nil
}
