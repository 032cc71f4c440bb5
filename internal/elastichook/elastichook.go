package elastichook

import "github.com/gohorovod/gohorovod/internal/job/rendezvous"

// Restart shuts the runtime rt (a *hvd.Runtime) down and initialises it
// again with the options of its last Init, joining the launcher's next
// rendezvous round (Horovod's reset). Set by the runtime package.
var Restart func(rt any) error

// TakeHostUpdate returns the host updates the launcher has announced to
// rt (a *hvd.Runtime) since the last call, merged, and whether there were
// any. Set by the runtime package.
var TakeHostUpdate func(rt any) (rendezvous.HostUpdate, bool)
