// Package rendezvous is how the workers of a job started without MPI find
// each other: the launcher (gohorovodrun --gloo) runs a Server that knows
// the job's slots, each worker Joins it with its slot (host name and local
// rank, from HOROVOD_HOSTNAME and HOROVOD_LOCAL_RANK) and an opaque payload
// (the addresses its transport listens on), and once every slot has joined
// the server answers every worker at once with its Assignment: its rank,
// size, local and cross ranks and sizes, and every member's payload in rank
// order.
//
// Ranks follow Horovod's rules (horovodrun's get_host_assignments): the
// rank of a slot is its index in the server's expected list, which the
// launcher builds host by host in -H order with local ranks ascending, so
// that the first hosts keep the lowest ranks; the local size is the number
// of slots on the host; the cross rank is the index of the host among the
// hosts that have a slot with that local rank, and the cross size the
// number of such hosts. Assign computes this, with no I/O.
//
// Every connection starts with internal/job/secret's handshake over the
// job's secret: a process that does not know it is refused before it can
// say anything, and the job goes on. After the handshake the two ends
// exchange small JSON messages, each prefixed with its length (4 bytes,
// big-endian): the worker sends its join; the server answers with an
// error (an unexpected or duplicate slot, a rendezvous that timed out) or,
// once everyone is there, with the assignment. A worker whose own deadline
// passes first asks the server which slots are missing, so that its error
// names them too.
//
// A worker that disconnects before the assignment gives its slot back: a
// restarted worker may join again, and a worker that died counts as
// missing.
//
// An elastic job (gohorovodrun's elastic mode, optim/elastic) meets
// again and again: its launcher runs a RoundServer, whose rounds each have
// their own members, and its workers call JoinRound with the last round
// they were in. A worker that leaves a round is reported ready and waits
// for the next; one the next round has no place for gets ErrRemoved. After
// its assignment a worker keeps a Session open, over which the launcher
// sends rank 0 host updates. Both servers share the handshake and the
// framing above.
package rendezvous
