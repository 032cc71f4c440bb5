// Package secret proves, on every connection of a job, that both ends know
// the job's secret, without the secret on the wire: a mutual HMAC-SHA256
// challenge and response (each side sends a fresh random nonce and answers
// the other's with an HMAC keyed by the secret over both nonces and its
// role, so that an answer cannot be reflected back or replayed). The
// embedded transport and its rendezvous service run it before anything
// else; a process without the key is refused and learns nothing.
package secret
