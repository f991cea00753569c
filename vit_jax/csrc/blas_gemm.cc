// XLA FFI handler: batched float32 GEMM through OpenBLAS (scipy-openblas32), on XLA's threads.
//
// Why: on x86 CPUs XLA's own dot runs at ~0.7x of OpenBLAS/MKL on ViT shapes (see
// docs/performance.md). The handler works on XLA's buffers in place (nothing is copied) and
// splits the product into row (or column) blocks that run single-threaded OpenBLAS on XLA's
// intra-op thread pool: OpenBLAS's own threads would spin after each call and starve XLA's.
// a: (batch, M, K), or (batch, K, M) when trans_a; b: (batch, K, N), or (batch, N, K) when
// trans_b; out: (batch, M, N). All row-major.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "cblas.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

using Operand = ffi::Buffer<ffi::F32, 3>;
using Result = ffi::ResultBuffer<ffi::F32, 3>;

namespace {

constexpr int64_t kMinBlock = 32;        // Rows (or columns) per block, at least.
constexpr int64_t kBlocksPerThread = 4;  // Slack for threads that join late.

// One batched product, cut into `blocks` pieces along the longer of M and N.
struct Gemm {
  const float* a;
  const float* b;
  float* out;
  int64_t batch, m, n, k;
  bool trans_a, trans_b, split_rows;
  int64_t per_batch, blocks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  void RunBlock(int64_t block) const {
    const int64_t i = block / per_batch, piece = block % per_batch;
    const int64_t extent = split_rows ? m : n;
    const int64_t begin = extent * piece / per_batch, end = extent * (piece + 1) / per_batch;
    const blasint lda = trans_a ? m : k, ldb = trans_b ? k : n;
    const float* a_i = a + i * m * k;
    const float* b_i = b + i * k * n;
    float* out_i = out + i * m * n;
    if (split_rows) {
      a_i += trans_a ? begin : begin * lda;
      out_i += begin * n;
    } else {
      b_i += trans_b ? begin * ldb : begin;
      out_i += begin;
    }
    const int64_t rows = split_rows ? end - begin : m, cols = split_rows ? n : end - begin;
    scipy_cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                      trans_b ? CblasTrans : CblasNoTrans, rows, cols, k, 1.f, a_i, lda, b_i,
                      ldb, 0.f, out_i, n);
  }

  // Takes blocks until none are left; any number of threads may call it.
  void Work() {
    for (int64_t block = next.fetch_add(1); block < blocks; block = next.fetch_add(1)) {
      RunBlock(block);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

// OpenBLAS runs single-threaded: the parallelism comes from XLA's pool.
const bool kSingleThreaded = [] {
  scipy_openblas_set_num_threads(1);
  return true;
}();

}  // namespace

static ffi::Error BlasGemmImpl(ffi::ThreadPool pool, Operand a, Operand b, Result out,
                               bool trans_a, bool trans_b) {
  const auto a_dims = a.dimensions();
  const auto b_dims = b.dimensions();
  const auto out_dims = out->dimensions();
  const int64_t batch = out_dims[0], m = out_dims[1], n = out_dims[2];
  const int64_t k = trans_a ? a_dims[1] : a_dims[2];
  if (a_dims[0] != batch || b_dims[0] != batch || (trans_a ? a_dims[2] : a_dims[1]) != m ||
      (trans_b ? b_dims[1] : b_dims[2]) != n || (trans_b ? b_dims[2] : b_dims[1]) != k) {
    return ffi::Error::InvalidArgument("blas_gemm: operand shapes do not match");
  }
  if (batch * m * n == 0) return ffi::Error::Success();
  if (k == 0) {
    std::fill_n(out->typed_data(), batch * m * n, 0.f);
    return ffi::Error::Success();
  }
  const int64_t threads = std::max<int64_t>(pool.num_threads(), 1);
  auto gemm = std::make_shared<Gemm>();
  gemm->a = a.typed_data();
  gemm->b = b.typed_data();
  gemm->out = out->typed_data();
  gemm->batch = batch;
  gemm->m = m;
  gemm->n = n;
  gemm->k = k;
  gemm->trans_a = trans_a;
  gemm->trans_b = trans_b;
  gemm->split_rows = m >= n;
  const int64_t extent = gemm->split_rows ? m : n;
  const int64_t wanted = std::max<int64_t>(1, kBlocksPerThread * threads / batch);
  gemm->per_batch = std::clamp<int64_t>(extent / kMinBlock, 1, wanted);
  gemm->blocks = batch * gemm->per_batch;
  // The calling thread works too and, unlike a blocking wait, cannot deadlock a busy pool:
  // helpers that start after every block is taken return at once.
  const int64_t helpers = std::min(threads, gemm->blocks) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([gemm] { gemm->Work(); });
  gemm->Work();
  while (gemm->done.load(std::memory_order_acquire) < gemm->blocks) std::this_thread::yield();
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(BlasGemm, BlasGemmImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<Operand>()
                                  .Arg<Operand>()
                                  .Ret<Operand>()
                                  .Attr<bool>("trans_a")
                                  .Attr<bool>("trans_b"));
