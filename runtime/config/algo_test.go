package config

import (
	"errors"
	"testing"
)

// TestValidateAlgos: Validate refuses an algorithm its collective does
// not have, set in a Config by a program rather than read from the
// environment, and accepts empty as auto.
func TestValidateAlgos(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil || c.EmbeddedAllgather != "" || c.EmbeddedAllreduce != "" {
		t.Fatalf("Default(): %v, algorithms %q and %q, want valid and empty", err, c.EmbeddedAllgather, c.EmbeddedAllreduce)
	}
	c.EmbeddedAllgather, c.EmbeddedAllreduce = "direct", "bruck"
	var ee *EnvError
	if err := c.Validate(); !errors.As(err, &ee) || ee.Var != EnvEmbeddedAllreduce || ee.Value != "bruck" {
		t.Errorf("Validate() with allreduce bruck = %v, want an *EnvError for %s", err, EnvEmbeddedAllreduce)
	}
}
