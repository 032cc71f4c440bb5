//go:build linux && (amd64 || arm64) && !nogpu

package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// The fusion buffer's copies as one kernel launch: cudaMemcpyBatchAsync
// still costs a few microseconds per copy, many times one copy of the same
// bytes for a model's gradients (docs/BENCHMARKS.md), while one kernel over
// every copy moves them at close to the device's copy bandwidth. The kernels (copykernel.ptx) are loaded through
// the CUDA driver API (libcuda.so.1, which every machine with the driver
// has), compiled by the driver for the device at first use, and each is
// checked on the device by a copy of known bytes (copyKernelSelfTest)
// before it is used: the first of CopyKernelPieces and CopyKernelWalk to
// pass is the one CopyDtoDBatch launches.
//
//go:embed copykernel.ptx
var copyKernelPTX string

// driverLib holds the driver API entry points the copy kernel needs.
type driverLib struct {
	moduleLoadDataEx, moduleGetFunction, moduleUnload, launchKernel, getErrorString uintptr
}

var (
	driverOnce sync.Once
	driver     *driverLib
	driverErr  error
)

// loadDriver opens libcuda.so.1 once.
func loadDriver() (*driverLib, error) {
	driverOnce.Do(func() {
		h, err := purego.Dlopen("libcuda.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			driverErr = fmt.Errorf("cuda: the driver library libcuda.so.1: %w", err)
			return
		}
		d := &driverLib{}
		for _, s := range []struct {
			name string
			p    *uintptr
		}{{"cuModuleLoadDataEx", &d.moduleLoadDataEx}, {"cuModuleGetFunction", &d.moduleGetFunction},
			{"cuModuleUnload", &d.moduleUnload}, {"cuLaunchKernel", &d.launchKernel}, {"cuGetErrorString", &d.getErrorString}} {
			if *s.p, err = purego.Dlsym(h, s.name); err != nil || *s.p == 0 {
				driverErr = fmt.Errorf("cuda: libcuda.so.1 has no %s", s.name)
				return
			}
		}
		driver = d
	})
	return driver, driverErr
}

// driverError describes a driver API result code.
func (d *driverLib) error(code int, what string) error {
	if code == 0 {
		return nil
	}
	var s *byte
	if d.getErrorString != 0 {
		call(d.getErrorString, iarg(code), uintptr(unsafe.Pointer(&s)))
	}
	msg := cString(s)
	if msg == "" {
		msg = "unknown error"
	}
	return fmt.Errorf("cuda: %s: %s (CUresult %d)", what, msg, code)
}

// copyKernel returns the kernel CopyDtoDBatch launches, loading the
// module and checking its kernels on the device at the first call.
func (g *GPU) copyKernel() (uintptr, CopyKernelKind, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := &g.kernel
	if k.tried {
		if k.err != nil {
			return 0, 0, k.err
		}
		return k.fns[k.use], k.use, nil
	}
	k.tried = true
	if err := g.loadCopyKernels(); err != nil {
		k.err = err
		for i := range k.failed {
			k.failed[i] = err
		}
		return 0, 0, err
	}
	for kind := CopyKernelKind(0); kind < copyKernelKinds; kind++ {
		if k.fns[kind] == 0 {
			continue // k.failed says why
		}
		if err := g.copyKernelSelfTest(kind, k.fns[kind]); err != nil {
			k.failed[kind] = err
			continue
		}
		k.use = kind
		return k.fns[kind], kind, nil
	}
	k.err = fmt.Errorf("cuda: no copy kernel passed its check on device %d: %w", g.dev, errors.Join(k.failed[:]...))
	return 0, 0, k.err
}

// copyKernelSelfTest copies selfTestBatch's copies of a patterned device
// buffer into another with kernel fn (of the given kind) and checks every
// byte of the destination, the bytes between the copies included: a kernel
// is used only if it copies right on this device (g.mu held; it uses the
// stream and the runtime directly).
func (g *GPU) copyKernelSelfTest(kind CopyKernelKind, fn uintptr) (err error) {
	fail := func(err error) error {
		return fmt.Errorf("cuda: the copy kernel %v failed its check on device %d: %w", kind, g.dev, err)
	}
	var bufs []uintptr
	defer func() {
		for _, p := range bufs {
			if ferr := g.rt.Free(g.dev, p); ferr != nil && err == nil {
				err = fail(ferr)
			}
		}
	}()
	alloc := func(n int) (uintptr, error) {
		p, err := g.rt.Malloc(g.dev, n)
		if err == nil {
			bufs = append(bufs, p)
		}
		return p, err
	}
	srcOff, dstOff, sizes, srcTotal, dstTotal := selfTestBatch()
	src, err := alloc(srcTotal)
	if err != nil {
		return fail(err)
	}
	dst, err := alloc(dstTotal)
	if err != nil {
		return fail(err)
	}
	in := make([]byte, srcTotal)
	for i := range in {
		in[i] = byte(i*131 + i>>8 + 1)
	}
	const untouched = 0xa5
	if err := g.stream.CopyHtoD(src, in); err != nil {
		return fail(err)
	}
	if err := g.stream.Memset(dst, untouched, dstTotal); err != nil {
		return fail(err)
	}
	dsts, srcs := make([]uintptr, len(sizes)), make([]uintptr, len(sizes))
	for i := range sizes {
		dsts[i], srcs[i] = dst+uintptr(dstOff[i]), src+uintptr(srcOff[i])
	}
	if err := g.launchKernel(kind, fn, dsts, srcs, sizes); err != nil {
		return fail(err)
	}
	out := make([]byte, dstTotal)
	if err := g.stream.CopyDtoH(out, dst); err != nil {
		return fail(err)
	}
	if err := g.stream.Synchronize(); err != nil {
		return fail(err)
	}
	want := make([]byte, dstTotal)
	for i := range want {
		want[i] = untouched
	}
	for i, n := range sizes {
		copy(want[dstOff[i]:dstOff[i]+n], in[srcOff[i]:srcOff[i]+n])
	}
	for i := range want {
		if out[i] != want[i] {
			return fail(fmt.Errorf("destination byte %d is %#x, want %#x", i, out[i], want[i]))
		}
	}
	return nil
}

// loadCopyKernels loads copykernel.ptx into the device's primary context
// and looks its kernels up (g.mu held). A kernel missing from the module
// is recorded in g.kernel.failed; an error means no kernel at all.
func (g *GPU) loadCopyKernels() error {
	k := &g.kernel
	lib, ok := g.rt.api.(*cudartLib)
	if !ok {
		return errors.New("cuda: the copy kernel needs the CUDA runtime loaded from its library")
	}
	d, err := loadDriver()
	if err != nil {
		return err
	}
	ptx := append([]byte(copyKernelPTX), 0)
	log := make([]byte, 4096)
	// CU_JIT_ERROR_LOG_BUFFER (5) and its size in bytes (6): the JIT's
	// complaint, should the driver refuse the PTX.
	opts := []uint32{5, 6}
	vals := []uintptr{uintptr(unsafe.Pointer(&log[0])), uintptr(len(log))}
	var module uintptr
	var pin runtime.Pinner
	pin.Pin(&log[0])
	defer pin.Unpin()
	code := lib.onDevice(g.dev, func() int {
		return call(d.moduleLoadDataEx, uintptr(unsafe.Pointer(&module)), uintptr(unsafe.Pointer(&ptx[0])), 2,
			uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	})
	if code != 0 {
		err := d.error(code, "loading the copy kernel (cuModuleLoadDataEx)")
		if jit := cString(&log[0]); jit != "" {
			err = fmt.Errorf("%w: %s", err, jit)
		}
		return err
	}
	found := 0
	for kind := CopyKernelKind(0); kind < copyKernelKinds; kind++ {
		var fn uintptr
		name := append([]byte(kind.entry()), 0)
		if code := call(d.moduleGetFunction, uintptr(unsafe.Pointer(&fn)), module, uintptr(unsafe.Pointer(&name[0]))); code != 0 {
			k.failed[kind] = d.error(code, fmt.Sprintf("cuModuleGetFunction(%s)", kind.entry()))
			continue
		}
		k.fns[kind] = fn
		found++
	}
	if found == 0 {
		call(d.moduleUnload, module)
		return errors.Join(k.failed[:]...)
	}
	k.module = module
	return nil
}

// CopyDtoDKernel queues the device-to-device copies dsts[i] <- srcs[i] of
// sizes[i] bytes on the device's stream as launches of the copy kernel in
// use (128 copies each; CopyKernelInUse), loaded and checked at the first
// call. It fails where no kernel can be loaded or passes its check
// (CopyKernelRefused says why); CopyDtoDBatch then uses
// cudaMemcpyBatchAsync instead.
func (g *GPU) CopyDtoDKernel(dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	if err := checkBatch(dsts, srcs, sizes); err != nil {
		return err
	}
	return g.launchCopies(dsts, srcs, sizes)
}

// CopyDtoDKernelOf is CopyDtoDKernel with the given kernel, whichever is
// in use (gpucheck measures them against each other). It fails if that
// kernel could not be loaded or failed its check on this device
// (CopyKernelFailed).
func (g *GPU) CopyDtoDKernelOf(kind CopyKernelKind, dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	if err := checkBatch(dsts, srcs, sizes); err != nil {
		return err
	}
	if kind < 0 || kind >= copyKernelKinds {
		return fmt.Errorf("cuda: no copy kernel %v", kind)
	}
	g.copyKernel() // loads and checks the kernels, once
	g.mu.Lock()
	fn, err := g.kernel.fns[kind], g.kernel.failed[kind]
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if fn == 0 {
		return fmt.Errorf("cuda: the copy kernel %v is not loaded (device %d closed?)", kind, g.dev)
	}
	return g.launchKernel(kind, fn, dsts, srcs, sizes)
}

// CopyKernelInUse returns the kernel that CopyDtoDBatch launches, loading
// and checking the kernels if no copy has yet; or why none is used.
func (g *GPU) CopyKernelInUse() (CopyKernelKind, error) {
	if err := g.live(); err != nil {
		return 0, err
	}
	_, kind, err := g.copyKernel()
	return kind, err
}

// CopyKernelFailed returns why the given kernel is not usable on this
// device (it could not be loaded, or its check on the device failed), or
// nil if it passed; nil also before the kernels are loaded.
func (g *GPU) CopyKernelFailed(kind CopyKernelKind) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if kind < 0 || kind >= copyKernelKinds {
		return fmt.Errorf("cuda: no copy kernel %v", kind)
	}
	return g.kernel.failed[kind]
}

// launchCopies is CopyDtoDKernel on a checked batch of a live GPU.
func (g *GPU) launchCopies(dsts, srcs []uintptr, sizes []int) error {
	fn, kind, err := g.copyKernel()
	if err != nil {
		return err
	}
	return g.launchKernel(kind, fn, dsts, srcs, sizes)
}

// launchKernel queues a checked batch as launches of kernel fn of the
// given kind, on the device's stream (the driver is loaded: fn is one of
// its functions).
func (g *GPU) launchKernel(kind CopyKernelKind, fn uintptr, dsts, srcs []uintptr, sizes []int) error {
	lib, d := g.rt.api.(*cudartLib), driver
	args := new(copyKernelArgs)
	params := new([2]uintptr)
	var pin runtime.Pinner
	pin.Pin(args)
	pin.Pin(params)
	defer pin.Unpin()
	params[0], params[1] = uintptr(unsafe.Pointer(&args.count)), uintptr(unsafe.Pointer(&args.dsts))
	return fillLaunches(args, dsts, srcs, sizes, func(plan copyPlan) error {
		blocks := plan.grid(kind)
		code := lib.onDevice(g.dev, func() int {
			return call(d.launchKernel, fn, uintptr(blocks), 1, 1, copyKernelThreads, 1, 1, 0, g.stream.handle,
				uintptr(unsafe.Pointer(params)), 0)
		})
		return d.error(code, fmt.Sprintf("cuLaunchKernel(%s, %d blocks) on device %d", kind.entry(), blocks, g.dev))
	})
}

// unloadCopyKernel releases the kernel's module (Close).
func (g *GPU) unloadCopyKernel() {
	g.mu.Lock()
	m := g.kernel.module
	g.kernel.module, g.kernel.fns = 0, [copyKernelKinds]uintptr{}
	g.mu.Unlock()
	if m != 0 && driver != nil {
		if lib, ok := g.rt.api.(*cudartLib); ok {
			lib.onDevice(g.dev, func() int { return call(driver.moduleUnload, m) })
		}
	}
}
