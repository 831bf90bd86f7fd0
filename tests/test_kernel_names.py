"""render.plain_kernel_name / cut_name: a long C++ kernel name loses what every such name repeats (void, namespaces,
the parameter list) before it is cut, so the part that tells two kernels apart survives; other names stay as given."""

from __future__ import annotations

from helpers.render import cut_name, plain_kernel_name

ADAM_DIV = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
            "TensorListScalarListMetadata<float, 1>, at::native::(anonymous namespace)::BinaryOpScalarListFunctor<float, "
            "1, 1, 0>, std::divides<float> >(at::native::(anonymous namespace)::TensorListScalarListMetadata<float, 1>, "
            "at::native::(anonymous namespace)::BinaryOpScalarListFunctor<float, 1, 1, 0>, std::divides<float>)")
ADAM_SQRT = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
             "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, "
             "at::native::Sqrt<float> >(at::native::(anonymous namespace)::TensorListMetadata<2>, "
             "at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::Sqrt<float>)")


def test_the_repeated_parts_go_and_the_functor_stays():
    assert plain_kernel_name(ADAM_DIV) == ("multi_tensor_apply_kernel<TensorListScalarListMetadata<float, 1>, "
                                           "BinaryOpScalarListFunctor<float, 1, 1, 0>, divides<float> >")
    cuts = {cut_name(n, 80) for n in (ADAM_DIV, ADAM_SQRT)}
    assert len(cuts) == 2 and all(len(c) <= 80 for c in cuts)
    assert any(c.endswith("divides<float> >") for c in cuts) and any(c.endswith("Sqrt<float> >") for c in cuts)
    # the old cut kept the parameter list's end, the same words for every kernel of a family
    assert not any("TensorListMetadata<2>, at::" in c for c in cuts)


def test_names_that_are_not_cpp_templates_stay_as_given():
    for name in ("aten::mm", "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", "ProfilerStep#3", "",
                 "autograd::engine::evaluate_function: AddmmBackward0", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"):
        assert plain_kernel_name(name) == name
    assert cut_name("aten::mm", 70) == "aten::mm"  # short names are never touched
    assert plain_kernel_name("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
                             "false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, "
                             "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
                             "float> >(cublasGemvParamsEx<int>, float, float)").startswith("gemv2T_kernel_val<int, int")
