// upfirdn2d's checks, its adjoint's parameters and its CPU twin: each output sums the shared
// formula's terms in its order (kernels/resample_math.h). A separable filter runs as two
// passes that vectorise: each input row is laid out zero-inserted and padded, split into
// its down_x phases (so that every tap reads a contiguous run), and filtered horizontally;
// then each output row sums its row taps' filtered rows. A 2-D filter sums a row of outputs
// at a time, the taps that land found once per output row and column.
#include "kernels/resample.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/resample_math.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/resample_cuda.h"
#endif

namespace tandem::kernels {

namespace {

struct FilterSize {
  int64_t fh = 0, fw = 0;
  bool separable = false;
};

FilterSize filter_size(const char* op, const Shape& filter) {
  TANDEM_CHECK(filter.size() == 1 || filter.size() == 2,
               op << ": needs a 1-D [k] or 2-D [fh, fw] filter, got " << shape_str(filter));
  FilterSize s;
  s.separable = filter.size() == 1;
  s.fh = filter[0];
  s.fw = s.separable ? filter[0] : filter[1];
  TANDEM_CHECK(s.fh > 0 && s.fw > 0, op << ": the filter " << shape_str(filter) << " is empty");
  return s;
}

// One filter tap of an output along one axis: the input sample it lands on and its filter
// index.
struct Tap {
  int64_t in = 0, f = 0;
};

// For each of `outputs` outputs along an axis, the taps that land on input samples, in
// upfirdn2d_at's order (resample_math.h): the same tests, made once per output.
std::vector<std::vector<Tap>> taps(int64_t outputs, int64_t in, int64_t k, int64_t up, int64_t down,
                                   int64_t pad0, bool flip) {
  std::vector<std::vector<Tap>> out(static_cast<size_t>(outputs));
  for (int64_t o = 0; o < outputs; ++o) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t v = o * down + i - pad0;
      if (v < 0 || v >= in * up || v % up != 0) continue;
      out[static_cast<size_t>(o)].push_back({v / up, flip ? i : k - 1 - i});
    }
  }
  return out;
}

// The column taps by tap index: for output ox, its j-th tap (when it has one, has = 1) at
// [j * outputs + ox]; a missing tap points at input 0 and filter index 0, and is not added.
struct ColumnTaps {
  ColumnTaps(const std::vector<std::vector<Tap>>& per_output, int64_t outputs) {
    for (const auto& t : per_output) count = std::max<int64_t>(count, static_cast<int64_t>(t.size()));
    in.assign(static_cast<size_t>(count * outputs), 0);
    f.assign(in.size(), 0);
    has.assign(in.size(), 0);
    for (int64_t o = 0; o < outputs; ++o) {
      const std::vector<Tap>& t = per_output[static_cast<size_t>(o)];
      for (size_t j = 0; j < t.size(); ++j) {
        const size_t at = j * static_cast<size_t>(outputs) + static_cast<size_t>(o);
        in[at] = t[j].in;
        f[at] = t[j].f;
        has[at] = 1;
      }
    }
  }
  int64_t count = 0;
  std::vector<int64_t> in, f;
  std::vector<uint8_t> has;
};

// The separable filter's horizontal pass, laid out once per call: the row zero-inserted and
// padded (or cropped), u[t] for t in [0, (out_w - 1) down + k), split into its down phases
// (u[t] at phase t % down, position t / down), so that tap j of output ox reads phase
// j % down at ox + j / down: a contiguous run for every tap. `source` holds, per slot of
// the phases, the input column it copies, or -1 for a zero.
struct RowLayout {
  explicit RowLayout(const resample_math::UpFirDn2dGeometry& g) {
    const UpFirDn2dParams& p = g.p;
    const int64_t span = (g.out_w - 1) * p.down_x + g.fw;
    per_phase = (span + p.down_x - 1) / p.down_x;
    source.assign(static_cast<size_t>(per_phase * p.down_x), -1);
    for (int64_t t = 0; t < span; ++t) {
      const int64_t v = t - p.pad_x0;
      if (v >= 0 && v < g.in_w * p.up_x && v % p.up_x == 0)
        source[static_cast<size_t>((t % p.down_x) * per_phase + t / p.down_x)] = v / p.up_x;
    }
  }
  int64_t per_phase = 0;
  std::vector<int64_t> source;
};

// The horizontal pass over one input row `src` [in_w]: out[ox] = sum over j ascending of
// u[ox down + j] * f[fj]. The zeros u holds where no input sample lands add nothing, so
// each sum is the shared formula's row sum. `phases` is scratch space of layout.source's size.
template <typename T>
void filter_row(const T* __restrict src, const T* __restrict f, T* __restrict out, T* __restrict phases,
                const RowLayout& layout, const resample_math::UpFirDn2dGeometry& g) {
  const int64_t* __restrict source = layout.source.data();
  const int64_t slots = static_cast<int64_t>(layout.source.size());
  for (int64_t i = 0; i < slots; ++i) phases[i] = source[i] >= 0 ? src[source[i]] : T(0);
  const int64_t k = g.fw, down = g.p.down_x;
  for (int64_t ox = 0; ox < g.out_w; ++ox) out[ox] = T(0);
  for (int64_t j = 0; j < k; ++j) {
    const T w = f[g.p.flip_filter ? j : k - 1 - j];
    const T* __restrict in = phases + (j % down) * layout.per_phase + j / down;
    for (int64_t ox = 0; ox < g.out_w; ++ox) out[ox] += in[ox] * w;
  }
}

// upfirdn2d with a separable filter, as filter_row's horizontal pass over every input row,
// then each output row's sum of f[fi] times its row taps' filtered rows, in tap order.
template <typename T>
void upfirdn2d_separable(const T* px, const T* pf, T* po, int64_t planes,
                         const resample_math::UpFirDn2dGeometry& g,
                         const std::vector<std::vector<Tap>>& rows) {
  const RowLayout layout(g);
  std::vector<T> filtered(static_cast<size_t>(g.in_h * g.out_w));
  std::vector<T> phases(layout.source.size());
  for (int64_t k = 0; k < planes; ++k) {
    const T* plane = px + k * g.in_h * g.in_w;
    for (int64_t y = 0; y < g.in_h; ++y)
      filter_row(plane + y * g.in_w, pf, filtered.data() + y * g.out_w, phases.data(), layout, g);
    T* dst = po + k * g.out_h * g.out_w;
    for (int64_t oy = 0; oy < g.out_h; ++oy) {
      T* __restrict acc = dst + oy * g.out_w;
      for (int64_t ox = 0; ox < g.out_w; ++ox) acc[ox] = T(0);
      for (const Tap& r : rows[static_cast<size_t>(oy)]) {
        const T w = pf[r.f];
        const T* __restrict row = filtered.data() + r.in * g.out_w;
        for (int64_t ox = 0; ox < g.out_w; ++ox) acc[ox] += row[ox] * w;
      }
    }
  }
}

}  // namespace

Shape upfirdn2d_output_shape(const char* op, const Shape& x, const Shape& filter, const UpFirDn2dParams& p) {
  TANDEM_CHECK(x.size() == 4, op << ": needs a 4-D [N, C, H, W] input, got " << shape_str(x));
  const FilterSize f = filter_size(op, filter);
  TANDEM_CHECK(p.up_x >= 1 && p.up_y >= 1 && p.down_x >= 1 && p.down_y >= 1,
               op << ": up and down must be >= 1, got up (" << p.up_x << ", " << p.up_y << "), down ("
                  << p.down_x << ", " << p.down_y << ")");
  const int64_t padded_h = x[2] * p.up_y + p.pad_y0 + p.pad_y1;
  const int64_t padded_w = x[3] * p.up_x + p.pad_x0 + p.pad_x1;
  TANDEM_CHECK(padded_h >= f.fh && padded_w >= f.fw,
               op << ": filter " << shape_str(filter) << " is larger than the padded input [" << padded_h
                  << ", " << padded_w << "] (input " << shape_str(x) << ", up (" << p.up_x << ", " << p.up_y
                  << "), pad x (" << p.pad_x0 << ", " << p.pad_x1 << "), pad y (" << p.pad_y0 << ", "
                  << p.pad_y1 << "))");
  return {x[0], x[1], (padded_h - f.fh) / p.down_y + 1, (padded_w - f.fw) / p.down_x + 1};
}

UpFirDn2dParams upfirdn2d_adjoint_params(const UpFirDn2dParams& p, const Shape& x_shape,
                                         const Shape& filter_shape, const Shape& out_shape) {
  const FilterSize f = filter_size("upfirdn2d_adjoint", filter_shape);
  UpFirDn2dParams a;
  a.up_x = p.down_x;
  a.up_y = p.down_y;
  a.down_x = p.up_x;
  a.down_y = p.up_y;
  a.pad_x0 = f.fw - p.pad_x0 - 1;
  a.pad_x1 = x_shape[3] * p.up_x - out_shape[3] * p.down_x + p.pad_x0 - p.up_x + 1;
  a.pad_y0 = f.fh - p.pad_y0 - 1;
  a.pad_y1 = x_shape[2] * p.up_y - out_shape[2] * p.down_y + p.pad_y0 - p.up_y + 1;
  a.flip_filter = !p.flip_filter;
  return a;
}

namespace resample_math {

UpFirDn2dGeometry upfirdn2d_geometry(const char* op, const Tensor& x, const Tensor& filter,
                                     const UpFirDn2dParams& p) {
  check_defined(op, x, "input");
  check_defined(op, filter, "filter");
  const Shape out = upfirdn2d_output_shape(op, x.shape(), filter.shape(), p);
  check_same_dtype(op, x, filter);
  check_same_device(op, x, filter);
  const FilterSize f = filter_size(op, filter.shape());
  UpFirDn2dGeometry g;
  g.in_h = x.size(2);
  g.in_w = x.size(3);
  g.out_h = out[2];
  g.out_w = out[3];
  g.fh = f.fh;
  g.fw = f.fw;
  g.separable = f.separable;
  g.p = p;
  return g;
}

}  // namespace resample_math

Tensor upfirdn2d(const Tensor& x, const Tensor& filter, const UpFirDn2dParams& p) {
  const char* op = "upfirdn2d";
  const resample_math::UpFirDn2dGeometry g = resample_math::upfirdn2d_geometry(op, x, filter, p);
  TANDEM_CUDA_ROUTE(x, cuda::upfirdn2d(x, filter, g));
  require_cpu(op, x);
  Tensor out = Tensor::empty({x.size(0), x.size(1), g.out_h, g.out_w}, x.dtype());
  const int64_t planes = x.size(0) * x.size(1);
  // The taps of each output row and column that land on input samples, found once:
  // upfirdn2d_at's terms in its order (rows outer, columns inner), without its per-tap tests.
  const std::vector<std::vector<Tap>> rows =
      taps(g.out_h, g.in_h, g.fh, p.up_y, p.down_y, p.pad_y0, p.flip_filter);
  if (g.separable) {
    dispatch_float(op, x.dtype(), [&]<typename T>() {
      upfirdn2d_separable<T>(x.data<T>(), filter.data<T>(), out.data<T>(), planes, g, rows);
    });
    return out;
  }
  const ColumnTaps cols(taps(g.out_w, g.in_w, g.fw, p.up_x, p.down_x, p.pad_x0, p.flip_filter), g.out_w);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pf = filter.data<T>();
    T* po = out.data<T>();
    for (int64_t k = 0; k < planes; ++k) {
      const T* plane = px + k * g.in_h * g.in_w;
      T* dst = po + k * g.out_h * g.out_w;
      for (int64_t oy = 0; oy < g.out_h; ++oy) {
        // A whole output row at a time, each output summing its terms in the order above
        // (row taps outer, the j-th column tap inner), the tap lists walked once per row.
        T* __restrict acc = dst + oy * g.out_w;
        for (int64_t ox = 0; ox < g.out_w; ++ox) acc[ox] = T(0);
        for (const Tap& r : rows[static_cast<size_t>(oy)]) {
          const T* __restrict row = plane + r.in * g.in_w;
          const T* wr = pf + r.f * g.fw;
          for (int64_t j = 0; j < cols.count; ++j) {
            const int64_t* __restrict in = cols.in.data() + j * g.out_w;
            const int64_t* __restrict f = cols.f.data() + j * g.out_w;
            const uint8_t* __restrict has = cols.has.data() + j * g.out_w;
            for (int64_t ox = 0; ox < g.out_w; ++ox) {
              const T term = row[in[ox]] * wr[f[ox]];
              acc[ox] = has[ox] ? acc[ox] + term : acc[ox];
            }
          }
        }
      }
    }
  });
  return out;
}

}  // namespace tandem::kernels
