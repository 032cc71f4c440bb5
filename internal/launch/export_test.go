package launch

// KillConfirm is killConfirm, for the end-to-end tests (package
// launch_test), which check that an elastic job re-forms within it.
const KillConfirm = killConfirm
