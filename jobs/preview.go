package jobs

import (
	"context"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Preview is what a dry run finds: how many messages a filter selects now, whether that
// count is exact, and the first of them.
type Preview struct {
	Matched int64
	// Exact is false when the count stopped at its scan budget: Matched is then a lower
	// bound.
	Exact  bool
	Sample []storeapi.BrowseItem
}

// PreviewFilter counts what f selects and returns the first sample matches, changing
// nothing, within ctx (an HTTP request's deadline). A filter on state and range alone
// is counted exactly by one ZCOUNT per shard; any other is counted by browsing pages
// (each bounded, see storeapi.Browser.Browse) until maxScan messages were examined (<= 0: no
// budget but ctx).
func PreviewFilter(ctx context.Context, st storeapi.Store, f storeapi.JobFilter, sample, maxScan int) (Preview, error) {
	var out Preview
	q := f.Query()
	if f.RangeOnly() {
		n, err := st.CountRange(ctx, f.State, f.From, f.To)
		if err != nil {
			return out, err
		}
		out.Matched, out.Exact = n, true
		if sample > 0 {
			q.Limit = sample
			page, err := st.Browse(ctx, q)
			if err != nil {
				return out, err
			}
			out.Sample = page.Items
		}
		return out, nil
	}
	q.Limit = storeapi.BrowseMaxLimit
	scanned := 0
	for {
		page, err := st.Browse(ctx, q)
		if err != nil {
			return out, err
		}
		scanned += page.Scanned
		out.Matched += int64(len(page.Items))
		for _, it := range page.Items {
			if len(out.Sample) < sample {
				out.Sample = append(out.Sample, it)
			}
		}
		if page.Next == "" {
			out.Exact = true
			return out, nil
		}
		if maxScan > 0 && scanned >= maxScan {
			return out, nil
		}
		q.Cursor = page.Next
	}
}
