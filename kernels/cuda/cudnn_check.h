// The check macro for cuDNN calls (kernels/cuda/conv_cudnn.cpp). Include only where cuDNN
// is built in (TANDEM_HAVE_CUDNN).
//
// TANDEM_CHECK_CUDNN(call, what): throws tandem::Error naming the call, file:line, the rank,
// cuDNN's status string and its last error message, and `what` (streamed: the op and its
// shapes).
#pragma once

#include <cudnn.h>

#include <sstream>
#include <string>

#include "runtime/error.h"

namespace tandem::kernels::cuda::detail {

// cuDNN's description of the latest failure on this thread ("" when it has none).
inline std::string cudnn_last_error() {
#if CUDNN_MAJOR >= 9
  char message[512] = {0};
  cudnnGetLastErrorString(message, sizeof(message));
  return message;
#else
  return "";
#endif
}

}  // namespace tandem::kernels::cuda::detail

#define TANDEM_CHECK_CUDNN(call, what)                                                               \
  do {                                                                                               \
    cudnnStatus_t tandem_cudnn_rc_ = (call);                                                         \
    if (tandem_cudnn_rc_ != CUDNN_STATUS_SUCCESS) {                                                  \
      std::ostringstream tandem_cudnn_os_;                                                           \
      tandem_cudnn_os_ << "cuDNN call failed: " #call ": " << cudnnGetErrorString(tandem_cudnn_rc_); \
      const std::string tandem_cudnn_detail_ = ::tandem::kernels::cuda::detail::cudnn_last_error();  \
      if (!tandem_cudnn_detail_.empty()) tandem_cudnn_os_ << " (" << tandem_cudnn_detail_ << ")";    \
      tandem_cudnn_os_ << "; in " << what;                                                           \
      ::tandem::detail::throw_error(__FILE__, __LINE__, tandem_cudnn_os_.str());                     \
    }                                                                                                \
  } while (0)
