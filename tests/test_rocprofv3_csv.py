"""rocprofv3 CSV kernel trace, from its documented header (no public sample: inline files)."""

from __future__ import annotations

from typing import Any

import pytest

import traceanalyze as ta
from traceanalyze.errors import MalformedInput
from traceanalyze.readers import detect_format

# ROCm 6.3 and before: Agent_Id an integer (the logical node id)
OLD = (
    '"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp",'
    '"End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X",'
    '"Workgroup_Size_Y","Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
    '"KERNEL_DISPATCH",2,1,10,"void foo<int>(int*) [clone .kd]",5,1000,3000,0,512,'
    "256,1,1,1000,1,1\n"
    '"KERNEL_DISPATCH",3,1,11,"Cijk_Ailk_Bljk_HHS_BH_MT128x128x32",6,3500,9000,0,0,'
    "256,1,1,4096,2,1\n"
)
# later: "Agent N", and more columns
NEW = (
    '"Kind","Agent_Id","Queue_Id","Stream_Id","Thread_Id","Dispatch_Id","Kernel_Id","Kernel_Name",'
    '"Correlation_Id","Start_Timestamp","End_Timestamp","LDS_Block_Size","Scratch_Size",'
    '"VGPR_Count","Accum_VGPR_Count","SGPR_Count","Workgroup_Size_X","Workgroup_Size_Y",'
    '"Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
    '"KERNEL_DISPATCH","Agent 3",7,0,99,1,4,"bar(float*)",8,100,400,0,0,32,16,24,64,1,1,128,1,1\n'
)
AGENTS = (
    '"Node_Id","Logical_Node_Id","Agent_Type","Cpu_Cores_Count","Cu_Count","Name",'
    '"Product_Name","Logical_Node_Type_Id"\n'
    '0,0,"CPU",64,0,"AMD EPYC","AMD EPYC",0\n'
    '2,2,"GPU",0,304,"gfx942","AMD Instinct MI300X",0\n'
    '3,3,"GPU",0,304,"gfx942","AMD Instinct MI300X",1\n'
)


def test_integer_agents_with_agent_info(write: Any) -> None:
    p = write("77_kernel_trace.csv", OLD)
    write("77_agent_info.csv", AGENTS)
    assert detect_format(p) == "rocprofv3_csv"
    t = ta.read(p)
    k = t.kernels
    assert k.select("device_id", "stream_id", "correlation_id", "name", "short_name").rows() == [
        (0, 1, 5, "void foo<int>(int*)", "foo"),
        (1, 1, 6, "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32", "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32"),
    ]
    assert k["duration_ns"].to_list() == [2000, 5500]
    assert k.select("grid_x", "grid_y", "block_x").rows() == [(4, 1, 256), (16, 2, 256)]
    assert t.devices.select("device_id", "node_id", "name", "sm_count").rows() == [
        (0, 2, "AMD Instinct MI300X", 304),
        (1, 3, "AMD Instinct MI300X", 304),
    ]


def test_agent_n_without_agent_info_keeps_the_node_id(write: Any) -> None:
    t = ta.read(write("5_kernel_trace.csv", NEW))
    k = t.kernels
    assert k.select("device_id", "stream_id", "registers_per_thread", "grid_x").rows() == [
        (3, 7, 48, 2)
    ]
    assert t.devices.select("device_id", "node_id").rows() == [(3, 3)]


def test_agent_n_with_agent_info(write: Any) -> None:
    write("5_agent_info.csv", AGENTS)
    t = ta.read(write("5_kernel_trace.csv", NEW))
    assert t.kernels["device_id"].to_list() == [1]


def test_bad_agent_is_a_named_error(write: Any) -> None:
    p = write("k_kernel_trace.csv", OLD.replace('"KERNEL_DISPATCH",2,', '"KERNEL_DISPATCH",GPU,'))
    with pytest.raises(MalformedInput, match=r"column 'Agent_Id'.*'GPU' is not an integer"):
        ta.read(p)
