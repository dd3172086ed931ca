package testserver

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

// stopProcess stops a server this package started: sig, then a kill after
// 10 s; then it removes the server's directory. exited is closed once the
// process has been waited for. cmd may be nil (a server not ours).
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}, sig os.Signal, name, dir string) error {
	var err error
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			err = fmt.Errorf("%s did not stop within 10s; killed", name)
		}
	}
	if dir != "" {
		if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	return err
}
