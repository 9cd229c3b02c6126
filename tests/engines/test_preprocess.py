"""Tests for sleap_live.engines.graph.preprocess."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sleap_live.engines.errors import InputMismatchError
from sleap_live.engines.graph import preprocess, resize
from sleap_live.engines.graph.preprocess import PreprocessConfig
from sleap_live.engines.ort_options import session_options


def _random_frames(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8))


def _onnx_of(module: torch.nn.Module, image: torch.Tensor, axes: dict[int, str]) -> bytes:
    """`module` exported to ONNX (input "image", `axes` dynamic), as bytes."""
    buffer = io.BytesIO()
    torch.onnx.export(
        module,
        (image,),
        buffer,
        dynamo=False,
        input_names=["image"],
        dynamic_axes={"image": axes},
        opset_version=17,
    )
    return buffer.getvalue()


class TestFramesToNCHW:
    def test_permutes_to_channels_first(self):
        frames = _random_frames((2, 5, 7, 3))
        out = preprocess.frames_to_nchw(frames)
        assert out.shape == (2, 3, 5, 7)
        assert torch.equal(out[1, 2], frames[1, :, :, 2])

    @pytest.mark.parametrize(
        ("frames", "message"),
        [
            (torch.zeros((1, 4, 4, 1), dtype=torch.float32), "must be uint8"),
            (torch.zeros((4, 4, 1), dtype=torch.uint8), "(batch, height, width, channels)"),
            (torch.zeros((1, 4, 4, 4), dtype=torch.uint8), "1 or 3 channels, got 4"),
        ],
    )
    def test_rejects_bad_frames(self, frames, message):
        with pytest.raises(InputMismatchError, match=re.escape(message)):
            preprocess.frames_to_nchw(frames)


class TestResizeUint8:
    @pytest.mark.parametrize(
        ("size", "out_size"),
        [
            ((100, 120), (50, 60)),  # halving
            ((97, 131), (40, 77)),  # odd factors, both axes down
            ((64, 64), (128, 128)),  # upscaling
            ((300, 500), (37, 23)),  # strong downscaling (wide kernels)
            ((200, 300), (199, 301)),  # one axis down, one up
            ((50, 50), (50, 80)),  # height unchanged
        ],
    )
    def test_exportable_version_equals_torch_uint8_antialiased_bilinear(self, size, out_size):
        image = _random_frames((2, 3, *size))
        expected = F.interpolate(
            image, size=out_size, mode="bilinear", align_corners=False, antialias=True
        )
        assert torch.equal(resize.resize_uint8_exportable(image, *out_size), expected)
        assert torch.equal(resize.resize_uint8(image, *out_size), expected)

    def test_exportable_version_is_exact_for_bright_images_and_strong_downscales(self):
        # A 34x downscale of bright pixels: fixed-point sums beyond float32's exact
        # integers (a plain float32 sum gets two pixels wrong here).
        cols, rows = torch.arange(1400), torch.arange(32)[:, None]
        image = (200 + (cols * 7 + rows * 13) % 56).to(torch.uint8)[None, None]
        expected = F.interpolate(
            image, size=(32, 41), mode="bilinear", align_corners=False, antialias=True
        )
        assert torch.equal(resize.resize_uint8_exportable(image, 32, 41), expected)

    def test_an_empty_batch_resizes_to_an_empty_batch(self):
        # A top-down graph resizes its crops, and a frame without animals has none.
        empty = _random_frames((0, 1, 40, 30))
        assert resize.resize_uint8_exportable(empty, 20, 15).shape == (0, 1, 20, 15)

    def test_exported_resize_runs_an_empty_batch(self):
        ort = pytest.importorskip("onnxruntime")

        class Halve(torch.nn.Module):
            def forward(self, image):
                height, width = resize.size_of(image, 2), resize.size_of(image, 3)
                return resize.resize_uint8_exportable(image, height // 2, width // 2)

        model = _onnx_of(Halve(), _random_frames((2, 1, 16, 12)), {0: "b", 2: "h", 3: "w"})
        session = ort.InferenceSession(model, session_options(), providers=["CPUExecutionProvider"])
        for shape in ((0, 1, 16, 12), (3, 1, 20, 10), (0, 1, 9, 7)):
            image = _random_frames(shape, seed=sum(shape))
            (got,) = session.run(None, {"image": image.numpy()})
            expected = Halve()(image).numpy()
            assert got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)

    def test_same_size_is_identity(self):
        image = _random_frames((1, 1, 33, 47))
        assert torch.equal(resize.resize_uint8(image, 33, 47), image)
        assert torch.equal(resize.resize_uint8_exportable(image, 33, 47), image)

    def test_within_a_grey_level_of_float_antialiased_bilinear(self):
        image = _random_frames((1, 1, 90, 110), seed=1)
        expected = F.interpolate(
            image.float(), size=(41, 67), mode="bilinear", align_corners=False, antialias=True
        )
        assert (resize.resize_uint8(image, 41, 67).float() - expected).abs().max() <= 1.0


def _torch_resize(image: torch.Tensor, height: int, width: int) -> torch.Tensor:
    return F.interpolate(
        image, size=(height, width), mode="bilinear", align_corners=False, antialias=True
    )


def _whole_factor_cases(count: int, seed: int) -> list[tuple[int, int, int, int]]:
    """(in_height, in_width, out_height, out_width): one axis or both shrunk by a whole factor."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        factor = int(rng.choice([2, 2, 2, 3, 4]))
        out = int(rng.integers(1, 90))
        other_in = int(rng.integers(2, 70))
        other_out = int(rng.choice([other_in, other_in // 2 or 1, int(rng.integers(1, 90))]))
        if rng.random() < 0.5:
            cases.append((factor * out, other_in, out, other_out))
        else:
            cases.append((other_in, factor * out, other_out, out))
    return cases


class TestWholeFactorPass:
    """A specialised resize by a whole factor is block matrix products: torch's numbers exactly."""

    @pytest.mark.parametrize(
        ("in_size", "out_size", "planned"),
        [
            ((1024, 1024), (512, 512), True),  # lab frames at input scale 0.5
            ((1024, 1280), (512, 640), True),
            ((216, 216), (108, 108), True),  # lab crops at 0.5
            ((2, 2), (1, 1), True),
            ((300, 90), (100, 30), True),  # a factor of 3
            ((254, 254), (127, 127), False),  # 127 outputs: prime, no useful block
            ((1023, 1023), (511, 511), False),  # not a whole factor
            ((2048, 2048), (256, 256), False),  # a factor of 8: fixed-point sums past float32
        ],
    )
    def test_plans_and_exactness(self, in_size, out_size, planned):
        assert (resize.WholeFactorPass.plan(in_size[1], out_size[1]) is not None) == planned
        image = _random_frames((2, 1, *in_size), seed=in_size[1])
        got = resize.resize_uint8_exportable(image, *out_size, specialised=True)
        assert torch.equal(got, _torch_resize(image, *out_size))

    def test_random_sizes_and_frames_equal_torch(self):
        for index, (in_h, in_w, out_h, out_w) in enumerate(_whole_factor_cases(60, seed=3)):
            image = _random_frames((2, 1 + 2 * (index % 2), in_h, in_w), seed=index)
            got = resize.resize_uint8_exportable(image, out_h, out_w, specialised=True)
            assert torch.equal(got, _torch_resize(image, out_h, out_w)), (in_h, in_w, out_h, out_w)

    def test_extreme_frames_equal_torch(self):
        # All-white frames and frames alternating 0/255 stress the sums and the rounding.
        image = torch.full((1, 1, 96, 130), 255, dtype=torch.uint8)
        checker = ((torch.arange(96)[:, None] + torch.arange(130)) % 2 * 255).to(torch.uint8)
        for frames in (image, checker[None, None]):
            got = resize.resize_uint8_exportable(frames, 48, 65, specialised=True)
            assert torch.equal(got, _torch_resize(frames, 48, 65))

    def test_onnx_runtime_gives_the_same_numbers_without_a_gather(self):
        ort = pytest.importorskip("onnxruntime")
        onnx = pytest.importorskip("onnx")

        class Halve(torch.nn.Module):
            def forward(self, image):
                return resize.resize_uint8(image, 60, 66, specialised=True)

        model = _onnx_of(Halve(), _random_frames((1, 1, 120, 132)), {0: "batch"})
        session = ort.InferenceSession(model, session_options(), providers=["CPUExecutionProvider"])
        for batch, seed in ((3, 1), (1, 2), (0, 3)):
            image = _random_frames((batch, 1, 120, 132), seed=seed)
            (got,) = session.run(None, {"image": image.numpy()})
            np.testing.assert_array_equal(got, _torch_resize(image, 60, 66).numpy())
        # No gather of pixels: the width pass is one Gemm over whole rows.
        ops = {node.op_type for node in onnx.load_from_string(model).graph.node}
        assert "Gather" not in ops and "Gemm" in ops


class TestChannels:
    def test_grayscale_truncates_luma_like_torchvision(self):
        rgb = torch.tensor(
            [[255, 255, 255], [10, 20, 30], [0, 0, 0], [200, 0, 0]], dtype=torch.uint8
        )
        frames = rgb.T.reshape(1, 3, 1, 4)
        gray = preprocess.ensure_channels(frames, ensure_rgb=False, ensure_grayscale=True)
        # 0.2989 R + 0.587 G + 0.114 B, truncated: white is 254.97 -> 254.
        assert gray.dtype == torch.uint8
        assert gray.flatten().tolist() == [254, 18, 0, 59]

    def test_grayscale_leaves_grey_frames_alone(self):
        frames = torch.full((1, 1, 2, 2), 255, dtype=torch.uint8)
        assert torch.equal(preprocess.ensure_channels(frames, False, True), frames)

    def test_rgb_repeats_grey(self):
        frames = _random_frames((2, 1, 4, 5))
        rgb = preprocess.ensure_channels(frames, ensure_rgb=True, ensure_grayscale=False)
        assert rgb.shape == (2, 3, 4, 5)
        assert all(torch.equal(rgb[:, c], frames[:, 0]) for c in range(3))

    def test_no_coercion_keeps_channels(self):
        frames = _random_frames((1, 3, 4, 5))
        assert preprocess.ensure_channels(frames, False, False) is frames

    def test_network_conversion_uses_unrounded_luma(self):
        image = torch.tensor([1.0, 0.5, 0.25]).reshape(1, 3, 1, 1)
        gray = preprocess.match_channels(image, in_channels=1)
        assert gray.shape == (1, 1, 1, 1)
        assert gray.item() == pytest.approx(0.2989 + 0.587 * 0.5 + 0.114 * 0.25, abs=1e-7)
        assert preprocess.match_channels(gray, in_channels=3).shape == (1, 3, 1, 1)
        assert torch.equal(preprocess.match_channels(gray, in_channels=1), gray)


class TestGeometry:
    def test_sizematch_downscales_into_the_box_and_pads(self):
        image = torch.full((1, 1, 100, 200), 7, dtype=torch.uint8)
        out, eff_scale = preprocess.sizematch(image, 64, 64)
        assert eff_scale.dtype == torch.float32
        assert eff_scale.item() == pytest.approx(0.32)
        assert out.shape == (1, 1, 64, 64)
        assert (out[..., :32, :] == 7).all()  # round(100 * 0.32) = 32 rows of image
        assert (out[..., 32:, :] == 0).all()

    def test_sizematch_upscales_and_defaults_missing_maximum(self):
        image = torch.full((1, 1, 30, 40), 9, dtype=torch.uint8)
        out, eff_scale = preprocess.sizematch(image, 60, None)
        # max_width defaults to the frame's width, so the scale is min(2, 1) = 1.
        assert eff_scale.item() == 1.0
        assert out.shape == (1, 1, 60, 40)
        assert (out[..., :30, :] == 9).all() and (out[..., 30:, :] == 0).all()

    def test_sizematch_exact_size_is_identity(self):
        image = _random_frames((1, 3, 30, 40))
        out, eff_scale = preprocess.sizematch(image, 30, 40)
        assert eff_scale.item() == 1.0
        assert torch.equal(out, image)

    def test_rescale_truncates_like_sleap_nn(self):
        image = _random_frames((1, 1, 203, 301))
        assert preprocess.rescale(image, 0.37).shape == (1, 1, 75, 111)  # int(75.11), int(111.37)
        assert preprocess.rescale(image, 1.0) is image

    def test_pad_to_stride_pads_bottom_right_with_zeros(self):
        image = _random_frames((1, 1, 33, 48))
        out = preprocess.pad_to_stride(image, 16)
        assert out.shape == (1, 1, 48, 48)
        assert torch.equal(out[..., :33, :], image)
        assert (out[..., 33:, :] == 0).all()

    def test_normalize_divides_by_255(self):
        out = preprocess.normalize(torch.tensor([0, 51, 255], dtype=torch.uint8))
        assert out.dtype == torch.float32
        assert torch.equal(out, torch.tensor([0, 51, 255], dtype=torch.float32) / 255.0)


class TestFrameInput:
    def test_steps_in_sleap_nn_order(self):
        config = PreprocessConfig(
            in_channels=1, max_stride=16, scale=0.5, max_height=100, max_width=100
        )
        frames = _random_frames((2, 3, 50, 80))
        image, eff_scale = preprocess.frame_input(frames, config)
        assert eff_scale.item() == 1.25
        # 50x80 -> size matched 62x100 (padded to 100x100) -> scaled 50x50 -> padded 64x64.
        assert image.shape == (2, 1, 64, 64) and image.dtype == torch.float32
        sized = resize.resize_uint8(frames, 62, 100)
        letterboxed = F.pad(sized, (0, 0, 0, 38))
        expected = preprocess.match_channels(
            preprocess.normalize(resize.resize_uint8(letterboxed, 50, 50)), 1
        )
        assert torch.equal(image[..., :50, :50], expected)
        assert (image[..., 50:, :] == 0).all()

    def test_config_validation(self):
        with pytest.raises(ValueError, match="cannot both be set"):
            PreprocessConfig(in_channels=1, ensure_rgb=True, ensure_grayscale=True)
        with pytest.raises(ValueError, match="in_channels"):
            PreprocessConfig(in_channels=2)

    def test_onnx_export_keeps_sizes_and_channels_dynamic(self, tmp_path):
        ort = pytest.importorskip("onnxruntime")
        config = PreprocessConfig(
            in_channels=1,
            max_stride=16,
            scale=0.6,
            ensure_grayscale=True,
            max_height=90,
            max_width=120,
        )

        class Wrapper(torch.nn.Module):
            def forward(self, frames):
                return preprocess.frame_input(preprocess.frames_to_nchw(frames), config)

        model = Wrapper()
        path = str(tmp_path / "preprocess.onnx")
        torch.onnx.export(
            model,
            (_random_frames((1, 60, 70, 3)),),
            path,
            dynamo=False,
            input_names=["frames"],
            output_names=["image", "eff_scale"],
            dynamic_axes={"frames": {0: "b", 1: "h", 2: "w", 3: "c"}},
            opset_version=17,
        )
        session = ort.InferenceSession(path, session_options(), providers=["CPUExecutionProvider"])
        for shape in ((2, 77, 151, 3), (1, 200, 130, 1), (1, 90, 120, 3)):
            frames = _random_frames(shape, seed=sum(shape))
            expected = [t.numpy() for t in model(frames)]
            got = session.run(None, {"frames": frames.numpy()})
            assert got[0].shape == expected[0].shape
            np.testing.assert_array_equal(got[0], expected[0])
            np.testing.assert_array_equal(got[1], expected[1])
