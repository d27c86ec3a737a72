#include "reducer/comm_hook.h"

namespace tandem {

namespace {

class AllreduceHook final : public CommHook {
 public:
  std::string name() const override { return "allreduce"; }
  bool prescaled() const override { return true; }
  std::shared_ptr<dist::Work> launch(GradBucket& b) override {
    b.bytes_sent = b.buffer.bytes();
    return b.group->allreduce(b.buffer, dist::ReduceOp::sum, b.tag);
  }
  void finish(GradBucket&) override {}
};

class CompressHook final : public CommHook {
 public:
  explicit CompressHook(DType wire) : wire_(wire) {}
  std::string name() const override { return wire_ == DType::f16 ? "fp16_compress" : "bf16_compress"; }
  bool prescaled() const override { return true; }
  std::shared_ptr<dist::Work> launch(GradBucket& b) override {
    b.scratch = b.buffer.to(wire_);
    b.bytes_sent = b.scratch.bytes();
    return b.group->allreduce(b.scratch, dist::ReduceOp::sum, b.tag);
  }
  void finish(GradBucket& b) override { b.buffer.copy_(b.scratch); }

 private:
  DType wire_;
};

class FunctionHook final : public CommHook {
 public:
  FunctionHook(std::string name, std::function<Tensor(GradBucket&)> fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string name() const override { return name_; }
  std::shared_ptr<dist::Work> launch(GradBucket& b) override {
    b.bytes_sent = b.buffer.bytes();
    b.scratch = fn_(b);
    TANDEM_CHECK(b.scratch.defined() && b.scratch.numel() == b.buffer.numel(),
                 "comm hook '" << name_ << "' returned " << b.scratch.str() << " for " << b.tag << " of "
                               << b.buffer.numel() << " elements");
    return nullptr;
  }
  void finish(GradBucket& b) override { b.buffer.copy_(b.scratch); }

 private:
  std::string name_;
  std::function<Tensor(GradBucket&)> fn_;
};

class ReduceFunctionHook final : public CommHook {
 public:
  explicit ReduceFunctionHook(DistFunction fn) : fn_(std::move(fn)) {}
  std::string name() const override { return "reduce_function"; }
  std::shared_ptr<dist::Work> launch(GradBucket& b) override {
    b.bytes_sent = b.buffer.bytes();
    std::vector<Tensor> tensors = b.param_views;
    fn_(tensors, *b.group);  // in place: the views write through into the buffer
    TANDEM_CHECK(tensors.size() == b.param_views.size(), "reduce_function returned "
                                                             << tensors.size() << " tensors for " << b.tag
                                                             << " of " << b.param_views.size());
    for (size_t k = 0; k < tensors.size(); ++k) {
      Tensor& view = b.param_views[k];
      if (tensors[k].shares_storage_with(view) && tensors[k].offset() == view.offset()) continue;
      // The function replaced a tensor instead of writing into it: keep its values.
      TANDEM_CHECK(tensors[k].defined() && tensors[k].numel() == view.numel(),
                   "reduce_function replaced the gradient of '" << b.param_names[k] << "' in " << b.tag
                                                                << " by " << tensors[k].str() << ", expected "
                                                                << view.numel() << " elements");
      view.copy_(tensors[k]);
    }
    return nullptr;
  }
  void finish(GradBucket&) override {}

 private:
  DistFunction fn_;
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<AllreduceHook>(); }
std::shared_ptr<CommHook> fp16_compress_hook() { return std::make_shared<CompressHook>(DType::f16); }
std::shared_ptr<CommHook> bf16_compress_hook() { return std::make_shared<CompressHook>(DType::bf16); }
std::shared_ptr<CommHook> make_comm_hook(std::string name, std::function<Tensor(GradBucket&)> fn) {
  return std::make_shared<FunctionHook>(std::move(name), std::move(fn));
}

std::shared_ptr<CommHook> reduce_function_hook(DistFunction fn) {
  TANDEM_CHECK(fn != nullptr, "reduce_function_hook: no function");
  return std::make_shared<ReduceFunctionHook>(std::move(fn));
}

}  // namespace tandem
