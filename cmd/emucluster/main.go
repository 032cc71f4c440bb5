package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/gohorovod/gohorovod/internal/emucluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	err := run(os.Args[1], os.Args[2:])
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "emucluster:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  emucluster up -n N [-rate 1gbit] [-loss 0.02] [-name NAME]
  emucluster down NAME
  emucluster exec NAME NODE CMD...
  emucluster silence|mend NAME NODE
  emucluster loss NAME NODE P
  emucluster rate NAME NODE RATE
  emucluster shim NAME DIR
  emucluster ssh [SSH ARGS] HOST [CMD...]    (cluster from $EMUCLUSTER)`)
	os.Exit(2)
}

func run(verb string, args []string) error {
	switch verb {
	case "up":
		return up(args)
	case "ssh":
		return ssh(args)
	}
	if len(args) < 1 {
		usage()
	}
	c, err := emucluster.Open(args[0])
	if err != nil {
		return err
	}
	switch verb {
	case "down":
		return c.Close()
	case "exec", "silence", "mend", "loss", "rate":
		return onNode(c, verb, args)
	case "shim":
		if len(args) != 2 {
			usage()
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		path, err := emucluster.WriteSSHShim(args[1], c.Options().Name, self)
		if err == nil {
			fmt.Println(path)
		}
		return err
	}
	usage()
	return nil
}

// ssh runs the ssh shim's command on the node of the cluster that
// $EMUCLUSTER names.
func ssh(args []string) error {
	name := os.Getenv("EMUCLUSTER")
	if name == "" {
		return errors.New("ssh: $EMUCLUSTER names no cluster (emucluster shim writes an ssh that sets it)")
	}
	c, err := emucluster.Open(name)
	if err != nil {
		return err
	}
	argv, env, err := c.SSHArgv(args)
	if err != nil {
		return err
	}
	return execve(argv, env)
}

// onNode runs a verb that acts on one node of c: args are the cluster,
// the node (its index or name), and the verb's own arguments.
func onNode(c *emucluster.Cluster, verb string, args []string) error {
	if len(args) < 2 {
		usage()
	}
	i, err := strconv.Atoi(args[1])
	if err != nil || i < 0 || i >= len(c.Nodes()) {
		if i, err = c.NodeOf(args[1]); err != nil {
			return err
		}
	}
	switch verb {
	case "exec":
		if len(args) < 3 {
			usage()
		}
		return execve(c.CommandArgv(i, args[2:]...), os.Environ())
	case "silence":
		return c.Silence(i)
	case "mend":
		return c.Mend(i)
	}
	if len(args) != 3 {
		usage()
	}
	if verb == "loss" {
		p, err := strconv.ParseFloat(args[2], 64)
		if err != nil {
			return fmt.Errorf("loss %q: want a share such as 0.02", args[2])
		}
		return c.SetLoss(i, p)
	}
	r, err := emucluster.ParseRate(args[2])
	if err != nil {
		return err
	}
	return c.SetRate(i, r)
}

func up(args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	n := fs.Int("n", 2, "nodes")
	rate := fs.String("rate", "0", "each link's rate in each direction (1gbit, 100mbit; 0: unshaped)")
	loss := fs.Float64("loss", 0, "share of packets each link drops each way")
	name := fs.String("name", "", "the cluster's name (default emu and this process's id)")
	fs.Parse(args)
	r, err := emucluster.ParseRate(*rate)
	if err != nil {
		return err
	}
	c, err := emucluster.New(emucluster.Options{Nodes: *n, Rate: r, Loss: *loss, Name: *name})
	if err != nil {
		return err
	}
	o := c.Options()
	fmt.Printf("cluster %s: %d nodes, links %s, loss %g\n", o.Name, o.Nodes, emucluster.FormatRate(o.Rate), o.Loss)
	for _, nd := range c.Nodes() {
		fmt.Printf("  node %d  %-14s %s\n", nd.Index, nd.Host, nd.Addr)
	}
	fmt.Printf("emucluster down %s removes it\n", o.Name)
	return nil
}

// execve runs argv with env, passing the standard streams through, and
// returns its exit as an *exec.ExitError.
func execve(argv, env []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, env)
}
