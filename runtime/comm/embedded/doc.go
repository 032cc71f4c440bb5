// Package embedded is a pure-Go transport for comm.Communicator: N processes
// on one machine or across hosts train together with nothing installed but
// the binary (CGO_ENABLED=0), where MPI is absent, and it is what elastic
// training rebuilds in place.
//
// # Setting up
//
// Each rank opens its listeners first (Listen: TCP, and a Unix socket for
// its neighbours on the same host), publishes Listeners.Peer through a
// rendezvous, learns every rank's Peer, and calls New with them, the job's
// secret and its listeners. Connections are made on demand: a rank
// connects to a peer the first time a collective sends to it or receives
// from it, over the Unix socket when both share a Host, else over TCP with
// TCP_NODELAY, so that a rank holds connections to the peers its
// algorithms use (a few times log2 n for the ring and the trees; an
// alltoall connects every pair it uses), not to every rank. Every
// connection proves in both directions that it knows the secret (package
// auth) before anything else is said, and a process that does not is
// refused while the group goes on. New returns after a dissemination
// barrier (log2 n rounds) has shown the whole group there; a rank that
// never arrives is named, with its host, when ConnectTimeout expires.
// NewLocalGroup does all of this for N ranks inside one process, for tests.
//
// # Frames
//
// Every message is one frame: a 40-byte header (kind, group id, call number,
// a fingerprint of the call's arguments, length) and the payload, written
// with one write or writev by the connection's writer goroutine, and read by
// its reader goroutine straight into the buffer the collective posted for
// it (receives of one group from one peer match frames in order). Groups
// made by Split and SplitLocal share the mesh; their ids derive, the same on
// every member, from the parent's id, its number of splits and the color.
// A frame whose call number, fingerprint or length is not the expected one
// fails the call instead of being written anywhere.
//
// Two ranks joined by a Unix socket move payloads above 64 KiB through
// rings of shared memory, one per direction, made by the sender the first
// time it sends such a payload to that peer and sized to it (4 slots of
// 64 to 512 KiB): an anonymous memory file whose descriptor travels over
// the socket, never a name in /dev/shm, so that the memory goes with the
// two processes however they end. A piece of the ring's reduce-scatter is
// reduced straight from the slot into the buffer, without a copy out;
// the header, still checked as above, and one token per filled slot go on
// the socket, which thus still orders everything and reveals a dead peer.
// Where a ring cannot be made the pair keeps its socket (Config.Logf says
// why); ranks on other hosts use TCP. See shm.go.
//
// # Algorithms, chosen by size
//
//   - Allreduce: recursive doubling below 256 KiB (log2 n exchanges; the
//     ranks past a power of two fold into a partner first), a pipelined ring
//     from 256 KiB (reduce-scatter then allgather, in pieces of 512 KiB with
//     four receives posted ahead, so that sending, receiving and reducing
//     overlap). Every element is combined in one order whatever rank
//     computes it, so every rank gets the same bits: recursive-doubling
//     partners both compute op(lower block, higher block); in the ring each
//     block is reduced once and then copied around.
//   - Bcast: binomial tree below 256 KiB, pipelined chain above.
//   - Allgatherv: Bruck's algorithm up to 128 KiB in all (ceil(log2 n)
//     rounds: in round k rank r sends the blocks it holds to r-2^k and
//     receives as many from r+2^k, straight into their places), the ring
//     above.
//   - Gatherv: a binomial tree rooted at the root; each rank passes on the
//     blocks of its subtree in one message (two where they wrap past the
//     last rank).
//   - Alltoallv: every receive posted, then every send queued (pairwise, in
//     the order rank+1, rank+2, ...): all pairs exchange at once.
//   - ReduceScatter: the ring's reduce-scatter, with uneven counts.
//   - Barrier: a dissemination barrier, ceil(log2 n) rounds of empty
//     frames, to rank+2^k from rank-2^k.
//   - Split: Bruck's allgather of every rank's color and key.
//
// So apart from Alltoallv, which needs every pair, and an agreement that
// finds a mismatch (below), a rank exchanges frames with 2 ceil(log2 n)
// peers at most in a collective, its agreement included. SetAlgorithms
// forces an allgather (direct: every rank to every other; bruck; ring) or
// an allreduce (doubling; ring) whatever the size, as the runtime does
// from GOHOROVOD_EMBEDDED_ALLGATHER and GOHOROVOD_EMBEDDED_ALLREDUCE.
//
// Reductions use the tensor package's kernels, so every dtype and op that
// tensor.Reduce supports works, tensor.BitAnd and tensor.BitOr included. In
// steady state a collective allocates nothing: requests, scratch and the
// ring's bookkeeping are reused from call to call.
//
// # Agreement and failure
//
// With the agreement check on (comm.AgreementChecker, the default), every
// collective first combines a digest of its arguments across the ranks by
// recursive doubling (log2 n exchanges of 40 bytes: the least and greatest
// fingerprint of the arguments, alltoallv's counts summed as hashes, and
// whether some rank has an invalid argument). When it shows a
// disagreement, or an invalid argument on any rank, every rank sends the
// description of its arguments to every other, so that the call fails on
// every rank, before any data moves, with the same words as on the other
// transports, and the group stays usable. The
// runtime turns the check off where negotiation already guarantees
// agreement; a disagreement the frames reveal then still fails the call,
// and tears the group down so that no rank waits for ever.
//
// A peer whose connection breaks (its process died), or that cannot be
// reached, fails every blocked and later call of every group that holds
// it, on every rank, with a *comm.PeerError naming it and its host: the
// ranks connected to it see it themselves and tell the group's other
// members they are connected to, once each, so that the news reaches
// ranks that never talked to it (and a rank that connects later, or sends
// the group a frame, is told then). Abort reaches every member the same
// way, with the cause's text. (No collective but Alltoallv hears from
// every rank directly, so a frame that a peer sent before its last
// collective on another group, an abort say, may arrive after that
// collective returns.) Close is idempotent and waits for the
// transport's goroutines.
package embedded
