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
// still costs a few microseconds per copy (measured on an H100: ResNet-50's
// 161 gradients took 569 µs batched against 80 µs for one copy of the same
// bytes), while one kernel that walks every copy moves them at close to
// the device's copy bandwidth. The kernel (copykernel.ptx) is loaded
// through the CUDA driver API (libcuda.so.1, which every machine with the
// driver has), compiled by the driver for the device at first use.

//go:embed copykernel.ptx
var copyKernelPTX string

const (
	// copyKernelMax is the copies one launch takes: three arrays of 128
	// 64-bit values fill 3 KiB of the 4 KiB of kernel parameters.
	copyKernelMax = 128
	// copyKernelThreads is the threads per block; the blocks are one per
	// 64 KiB of the launch's bytes, at least one and at most
	// copyKernelBlocks.
	copyKernelThreads = 256
	copyKernelBlocks  = 2048
)

// copyKernelArgs is the kernel's parameter list: count, then the
// destinations, sources and sizes (the PTX's args, 8-byte aligned).
type copyKernelArgs struct {
	count uint32
	_     uint32
	dsts  [copyKernelMax]uint64
	srcs  [copyKernelMax]uint64
	sizes [copyKernelMax]uint64
}

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

// copyKernel returns the loaded kernel function of g, loading it at the
// first call.
func (g *GPU) copyKernel() (uintptr, *driverLib, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := &g.kernel
	if k.tried {
		return k.fn, driver, k.err
	}
	k.tried = true
	lib, ok := g.rt.api.(*cudartLib)
	if !ok {
		k.err = errors.New("cuda: the copy kernel needs the CUDA runtime loaded from its library")
		return 0, nil, k.err
	}
	d, err := loadDriver()
	if err != nil {
		k.err = err
		return 0, nil, err
	}
	ptx := append([]byte(copyKernelPTX), 0)
	log := make([]byte, 4096)
	// CU_JIT_ERROR_LOG_BUFFER (5) and its size in bytes (6): the JIT's
	// complaint, should the driver refuse the PTX.
	opts := []uint32{5, 6}
	vals := []uintptr{uintptr(unsafe.Pointer(&log[0])), uintptr(len(log))}
	var module, fn uintptr
	name := append([]byte("gohorovod_copy_batch"), 0)
	var pin runtime.Pinner
	pin.Pin(&log[0])
	defer pin.Unpin()
	code := lib.onDevice(g.dev, func() int {
		return call(d.moduleLoadDataEx, uintptr(unsafe.Pointer(&module)), uintptr(unsafe.Pointer(&ptx[0])), 2,
			uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	})
	if code != 0 {
		k.err = d.error(code, "loading the copy kernel (cuModuleLoadDataEx)")
		if jit := cString(&log[0]); jit != "" {
			k.err = fmt.Errorf("%w: %s", k.err, jit)
		}
		return 0, d, k.err
	}
	if code := call(d.moduleGetFunction, uintptr(unsafe.Pointer(&fn)), module, uintptr(unsafe.Pointer(&name[0]))); code != 0 {
		k.err = d.error(code, "cuModuleGetFunction(gohorovod_copy_batch)")
		call(d.moduleUnload, module)
		return 0, d, k.err
	}
	k.module, k.fn = module, fn
	return fn, d, nil
}

// CopyDtoDKernel queues the device-to-device copies dsts[i] <- srcs[i] of
// sizes[i] bytes on the device's stream as launches of one copy kernel
// (128 copies each), loaded through the driver API at the first call. It
// fails where the kernel cannot be loaded (CopyKernelRefused says why);
// CopyDtoDBatch then uses cudaMemcpyBatchAsync instead.
func (g *GPU) CopyDtoDKernel(dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	if err := checkBatch(dsts, srcs, sizes); err != nil {
		return err
	}
	return g.launchCopies(dsts, srcs, sizes)
}

// launchCopies is CopyDtoDKernel on a checked batch of a live GPU.
func (g *GPU) launchCopies(dsts, srcs []uintptr, sizes []int) error {
	fn, d, err := g.copyKernel()
	if err != nil {
		return err
	}
	lib := g.rt.api.(*cudartLib)
	args := new(copyKernelArgs)
	params := new([2]uintptr)
	var pin runtime.Pinner
	pin.Pin(args)
	pin.Pin(params)
	defer pin.Unpin()
	params[0], params[1] = uintptr(unsafe.Pointer(&args.count)), uintptr(unsafe.Pointer(&args.dsts))
	flush := func(total int) error {
		if args.count == 0 {
			return nil
		}
		blocks := min(max(total>>16, 1), copyKernelBlocks)
		code := lib.onDevice(g.dev, func() int {
			return call(d.launchKernel, fn, uintptr(blocks), 1, 1, copyKernelThreads, 1, 1, 0, g.stream.handle,
				uintptr(unsafe.Pointer(params)), 0)
		})
		args.count = 0
		return d.error(code, fmt.Sprintf("cuLaunchKernel(gohorovod_copy_batch, %d blocks) on device %d", blocks, g.dev))
	}
	total := 0
	for i, n := range sizes {
		if n == 0 {
			continue
		}
		c := args.count
		args.dsts[c], args.srcs[c], args.sizes[c] = uint64(dsts[i]), uint64(srcs[i]), uint64(n)
		args.count++
		total += n
		if args.count == copyKernelMax {
			if err := flush(total); err != nil {
				return err
			}
			total = 0
		}
	}
	return flush(total)
}

// unloadCopyKernel releases the kernel's module (Close).
func (g *GPU) unloadCopyKernel() {
	g.mu.Lock()
	m := g.kernel.module
	g.kernel.module, g.kernel.fn = 0, 0
	g.mu.Unlock()
	if m != 0 && driver != nil {
		if lib, ok := g.rt.api.(*cudartLib); ok {
			lib.onDevice(g.dev, func() int { return call(driver.moduleUnload, m) })
		}
	}
}
