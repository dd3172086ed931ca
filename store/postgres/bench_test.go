package postgres_test

import (
	"testing"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/postgres"
	"github.com/flexiq/flexiq/store/storetest"
)

func benchStore(t testing.TB, faults store.Faults) store.Store {
	return open(t, testserver.Postgres(t), postgres.Options{Faults: faults})
}

func BenchmarkJobEnqueueMany(b *testing.B)      { storetest.BenchEnqueueMany(b, benchStore, false) }
func BenchmarkJobEnqueueManyKeyed(b *testing.B) { storetest.BenchEnqueueMany(b, benchStore, true) }
func BenchmarkJobClaimAck(b *testing.B)         { storetest.BenchClaimAck(b, benchStore) }
