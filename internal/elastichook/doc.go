// Package elastichook carries the two controls of a runtime that only the
// elastic training loop (optim/elastic) uses, so that they are not part of
// the runtime's public API: re-forming the group after a failure or a
// change of hosts, and taking the launcher's host updates.
//
// The runtime package sets the hooks in its init; optim/elastic calls them
// with the *hvd.Runtime it was given. Nothing else should.
package elastichook
