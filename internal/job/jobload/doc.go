// Package jobload is a load generator for the job's control plane: it has
// N clients meet, all at once and over loopback (127.0.0.1), through the
// real servers a job forms through, as N ranks would, and measures them.
//
//   - Rendezvous: each client joins the rendezvous server
//     (internal/job/rendezvous) with its slot and a payload of addresses,
//     and waits for its assignment and every member's payload.
//   - Store: each client does what torch's c10d store barrier and address
//     exchange do against a TCPStore (internal/job/tcpstore, served by
//     tcpstoretest): it sets its key, adds one to the arrival counter, the
//     last to arrive sets the "everyone is here" key, every client waits
//     for that key, and then reads it and its ring neighbour's key.
//
// The clients run in a process of their own (Spawn starts the test binary
// again, whose TestMain calls ChildMain), so that the server's process
// holds only the server's side of every connection: 10,000 clients need
// 10,000 descriptors on each side, and the server's memory is measured
// (Meter: peak HeapInuse, Sys and goroutines above a baseline) without the
// clients'. Both processes raise RLIMIT_NOFILE (internal/job/fdlimit) and
// say so when they cannot.
//
// A client that is refused, fails or is not served within the run's
// timeout counts as failed, with its error; a Result gives the time until
// the last client was served, each client's latency (median, 99th
// percentile, maximum) and the first errors.
package jobload
