package cuda

import (
	"fmt"

	"github.com/gohorovod/gohorovod/tensor"
)

// ToDevice copies a host tensor into new memory on d and returns the
// device tensor (same dtype and shape). The caller frees it with
// FreeTensor.
func ToDevice(d Device, t *tensor.Tensor) (*tensor.Tensor, error) {
	if t.Device().Kind != tensor.CPU {
		return nil, fmt.Errorf("cuda: ToDevice of %v, which is not on the host", t)
	}
	p, err := d.Alloc(t.NumBytes())
	if err != nil {
		return nil, err
	}
	if err := d.CopyHtoD(p, t.Bytes()); err != nil {
		_ = d.Free(p)
		return nil, err
	}
	if err := d.Sync(); err != nil {
		_ = d.Free(p)
		return nil, err
	}
	return tensor.NewDevice(t.DType(), tensor.Device{Kind: tensor.GPU, Index: d.Ordinal()}, p, t.Shape()...), nil
}

// ToHost copies a device tensor on d into a new host tensor.
func ToHost(d Device, t *tensor.Tensor) (*tensor.Tensor, error) {
	if err := onDevice(d, t); err != nil {
		return nil, err
	}
	h := tensor.New(t.DType(), t.Shape()...)
	if err := CopyToHost(d, h, t); err != nil {
		return nil, err
	}
	return h, nil
}

// CopyToHost copies device tensor src on d into host tensor dst, which
// must have the same dtype and number of elements, and waits for the copy.
func CopyToHost(d Device, dst, src *tensor.Tensor) error {
	if err := onDevice(d, src); err != nil {
		return err
	}
	if err := sameLayout(dst, src); err != nil {
		return err
	}
	if err := d.CopyDtoH(dst.Bytes(), src.DevicePtr()); err != nil {
		return err
	}
	return d.Sync()
}

// CopyToDevice copies host tensor src into device tensor dst on d, which
// must have the same dtype and number of elements, and waits for the copy.
func CopyToDevice(d Device, dst, src *tensor.Tensor) error {
	if err := onDevice(d, dst); err != nil {
		return err
	}
	if err := sameLayout(dst, src); err != nil {
		return err
	}
	if err := d.CopyHtoD(dst.DevicePtr(), src.Bytes()); err != nil {
		return err
	}
	return d.Sync()
}

// FreeTensor frees the memory of a device tensor made by ToDevice.
func FreeTensor(d Device, t *tensor.Tensor) error {
	if err := onDevice(d, t); err != nil {
		return err
	}
	return d.Free(t.DevicePtr())
}

func onDevice(d Device, t *tensor.Tensor) error {
	dev := t.Device()
	if dev.Kind != tensor.GPU || dev.Index != d.Ordinal() {
		return fmt.Errorf("cuda: %v is not on GPU %d", t, d.Ordinal())
	}
	return nil
}

func sameLayout(a, b *tensor.Tensor) error {
	if a.DType() != b.DType() || a.Len() != b.Len() {
		return fmt.Errorf("cuda: copy between %v and %v: dtype or size differs", a, b)
	}
	return nil
}
