#include "support.hpp"
#include "support/decode.hpp"

#include <lodge/azure/xml.hpp>

using namespace lodge;

TEST_CASE("azure error bodies give the code and the first line of the message") {
  auto e = azure::parse_error(R"(<?xml version="1.0" encoding="utf-8"?><Error><Code>BlobAlreadyExists</Code>)"
                              R"(<Message>The specified blob already exists.
RequestId:abc
Time:2023-11-14T22:13:20.0000000Z</Message></Error>)");
  REQUIRE(e);
  CHECK(e->code == "BlobAlreadyExists");
  CHECK(e->message.rfind("The specified blob already exists.", 0) == 0);
  CHECK_FALSE(azure::parse_error("<Other/>"));
  CHECK_FALSE(azure::parse_error("not xml"));
}

TEST_CASE("azure XML with a DOCTYPE is refused, so no entity is ever expanded") {
  CHECK_FALSE(azure::parse_error(R"(<?xml version="1.0"?><!DOCTYPE Error [<!ENTITY x "boom">]>)"
                                 R"(<Error><Code>&x;</Code></Error>)"));
  CHECK_FALSE(azure::parse_list_blobs(R"(<!DOCTYPE EnumerationResults><EnumerationResults/>)"));
}

TEST_CASE("List Blobs: names, sizes, ETags, metadata, versions and the next marker") {
  auto p = azure::parse_list_blobs(R"(<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://127.0.0.1:10000/devstoreaccount1" ContainerName="c">
  <Prefix>p/</Prefix><MaxResults>2</MaxResults>
  <Blobs>
    <Blob><Name>p/a</Name><VersionId>2023-11-14T22:13:20.0000000Z</VersionId><IsCurrentVersion>true</IsCurrentVersion>
      <Properties><Last-Modified>Tue, 14 Nov 2023 22:13:20 GMT</Last-Modified><Etag>0x8DBE5</Etag>
        <Content-Length>11</Content-Length><BlobType>BlockBlob</BlobType></Properties>
      <Metadata><LodgeRecord>42</LodgeRecord><lodgesha256>ab</lodgesha256></Metadata></Blob>
    <Blob><Name>p/b</Name><VersionId>v1</VersionId>
      <Properties><Etag>"0x1"</Etag><Content-Length>0</Content-Length></Properties></Blob>
  </Blobs>
  <NextMarker>2!8!cC9i</NextMarker>
</EnumerationResults>)");
  REQUIRE(p);
  REQUIRE(p->blobs.size() == 2);
  CHECK(p->blobs[0].name == "p/a");
  CHECK(p->blobs[0].size == 11);
  CHECK(p->blobs[0].etag == "0x8DBE5");
  CHECK(p->blobs[0].metadata.at("lodgerecord") == "42");
  CHECK(p->blobs[0].metadata.at("lodgesha256") == "ab");
  CHECK(p->blobs[0].is_current_version);
  CHECK(p->blobs[1].etag == "0x1");
  CHECK(p->blobs[1].version_id == "v1");
  CHECK(p->next_marker == "2!8!cC9i");
  auto last = azure::parse_list_blobs("<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>");
  REQUIRE(last);
  CHECK(last->blobs.empty());
  CHECK(last->next_marker.empty());
  CHECK_FALSE(azure::parse_list_blobs("<EnumerationResults><Blobs><Blob><Name>x</Name><Properties>"
                                      "<Content-Length>-1</Content-Length></Properties></Blob></Blobs>"
                                      "</EnumerationResults>"));
}

TEST_CASE("List Blobs with include=tags: each blob's tags, none where it has none") {
  auto p = azure::parse_list_blobs(R"(<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Blobs>
    <Blob><Name>p/a</Name><Properties><Content-Length>1</Content-Length><TagCount>2</TagCount></Properties>
      <Tags><TagSet><Tag><Key>state</Key><Value>pending</Value></Tag><Tag><Key>team</Key><Value>a&amp;b</Value></Tag></TagSet></Tags></Blob>
    <Blob><Name>p/b</Name><Properties><Content-Length>1</Content-Length></Properties></Blob>
  </Blobs><NextMarker/></EnumerationResults>)");
  REQUIRE(p);
  REQUIRE(p->blobs.size() == 2);
  CHECK(p->blobs[0].tags == std::map<std::string, std::string>{{"state", "pending"}, {"team", "a&b"}});
  CHECK(p->blobs[1].tags.empty());
}

TEST_CASE("Get Block List: committed and uncommitted blocks") {
  auto l = azure::parse_block_list(R"(<?xml version="1.0" encoding="utf-8"?><BlockList>
<CommittedBlocks><Block><Name>YQ==</Name><Size>4</Size></Block></CommittedBlocks>
<UncommittedBlocks><Block><Name>Yg==</Name><Size>5</Size></Block><Block><Name>Yw==</Name><Size>6</Size></Block></UncommittedBlocks>
</BlockList>)");
  REQUIRE(l);
  REQUIRE(l->committed.size() == 1);
  CHECK(l->committed[0].name == "YQ==");
  REQUIRE(l->uncommitted.size() == 2);
  CHECK(l->uncommitted[1].size == 6);
  auto empty = azure::parse_block_list("<BlockList><CommittedBlocks/></BlockList>");
  REQUIRE(empty);
  CHECK(empty->uncommitted.empty());
}

TEST_CASE("tags and block lists are built escaped, and tags read back") {
  CHECK(
      azure::block_list_xml({"YQ==", "a<b"}) ==
      R"(<?xml version="1.0" encoding="utf-8"?><BlockList><Latest>YQ==</Latest><Latest>a&lt;b</Latest></BlockList>)");
  std::string x = azure::tags_xml({{"state", "pending"}, {"q", "a&b"}});
  CHECK(x ==
        R"(<?xml version="1.0" encoding="utf-8"?><Tags><TagSet><Tag><Key>q</Key><Value>a&amp;b</Value></Tag>)"
        R"(<Tag><Key>state</Key><Value>pending</Value></Tag></TagSet></Tags>)");
  auto back = test::parse_blob_tags(x);
  REQUIRE(back);
  CHECK(back->at("state") == "pending");
  CHECK(back->at("q") == "a&b");
}
