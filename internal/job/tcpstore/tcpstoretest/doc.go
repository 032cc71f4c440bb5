// Package tcpstoretest is a TCPStore server of torch 2's protocol,
// written from torch's TCPStoreBackend.hpp and TCPStoreLibUvBackend.cpp
// independently of the client in package tcpstore, for the tests of the
// client and of the workers that meet through torchrun's store. Debian's
// torch is 1.13, whose server speaks the older protocol: this one stands
// in for torch 2.4 and later (PING answered) and for a validating server
// without PING.
package tcpstoretest
