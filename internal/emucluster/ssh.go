package emucluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// sshValued are the ssh options that take a value (as ssh(1) lists them).
const sshValued = "BbcDEeFIiJLlmOopQRSWw"

// ParseSSH reads an ssh command line (without "ssh" itself), as the
// launcher and mpirun write one, into the host and the remote command
// (ssh joins the words after the host with spaces, for the remote shell).
// A user@ prefix is dropped.
func ParseSSH(args []string) (host, command string, err error) {
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		// Flags may be grouped (-xT); a valued one takes the rest of the
		// word, or the next word.
		for j := 1; j < len(a); j++ {
			if strings.IndexByte(sshValued, a[j]) >= 0 {
				if j == len(a)-1 {
					i++
				}
				break
			}
		}
	}
	if i >= len(args) {
		return "", "", fmt.Errorf("emucluster ssh: no host in %q", strings.Join(args, " "))
	}
	host = args[i]
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		host = host[at+1:]
	}
	return host, strings.Join(args[i+1:], " "), nil
}

// SSHArgv is the argv that runs an ssh command line (without "ssh") on
// its node, as ssh would: the remote command through sh -c in the node's
// namespace and hostname, with a login's bare environment (PATH, HOME,
// USER, LOGNAME and TERM kept; nothing else of the caller's), or a shell
// reading standard input where there is no command.
func (c *Cluster) SSHArgv(args []string) ([]string, []string, error) {
	host, command, err := ParseSSH(args)
	if err != nil {
		return nil, nil, err
	}
	i, err := c.NodeOf(host)
	if err != nil {
		return nil, nil, err
	}
	var env []string
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "TERM"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if command == "" {
		return c.CommandArgv(i, "sh"), env, nil
	}
	return c.CommandArgv(i, "sh", "-c", command), env, nil
}

// WriteSSHShim writes dir/ssh, a script that runs `emucluster ssh` (the
// command at path emucluster) on cluster name, and returns its path. Put
// dir first on PATH and the launcher's and mpirun's ssh reach the nodes.
func WriteSSHShim(dir, name, emucluster string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "ssh")
	script := fmt.Sprintf("#!/bin/sh\n# ssh to the nodes of emulated cluster %s\nEMUCLUSTER=%s exec %q ssh \"$@\"\n", name, name, emucluster)
	return p, os.WriteFile(p, []byte(script), 0o755)
}
